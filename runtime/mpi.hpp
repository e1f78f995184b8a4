// MPI under mpirun, when hzp is built with it (HZP_HAVE_MPI; OpenMPI from
// Debian): initialised on first use, finalised once at the end of hzp-run.
// Without MPI every call is a no-op and mpi_built() is false.
#pragma once

#include <cstddef>

namespace hzp::runtime {

[[nodiscard]] bool mpi_built();
/// MPI_Init once (no-op when already initialised or not built with MPI).
void mpi_init();
/// MPI_Bcast of `bytes` from rank 0 over MPI_COMM_WORLD.
void mpi_broadcast(void* data, std::size_t bytes);
void mpi_barrier();
/// This process's MPI rank and the world size (0 and 1 without MPI).
[[nodiscard]] int mpi_rank();
[[nodiscard]] int mpi_size();
/// MPI_Finalize, when MPI was initialised and not yet finalised.
void mpi_finalize();

}  // namespace hzp::runtime
