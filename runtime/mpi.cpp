// MPI when built with it (see mpi.hpp).
#include "runtime/mpi.hpp"

#ifdef HZP_HAVE_MPI
#include <mpi.h>
#endif

namespace hzp::runtime {

#ifdef HZP_HAVE_MPI
bool mpi_built() { return true; }
void mpi_init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
}
void mpi_broadcast(void* data, std::size_t bytes) {
  mpi_init();
  MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
}
void mpi_barrier() {
  mpi_init();
  MPI_Barrier(MPI_COMM_WORLD);
}
int mpi_rank() {
  mpi_init();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int mpi_size() {
  mpi_init();
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
void mpi_finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}
#else
bool mpi_built() { return false; }
void mpi_init() {}
void mpi_broadcast(void*, std::size_t) {}
void mpi_barrier() {}
int mpi_rank() { return 0; }
int mpi_size() { return 1; }
void mpi_finalize() {}
#endif

}  // namespace hzp::runtime
