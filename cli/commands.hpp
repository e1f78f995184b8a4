// The hzp subcommands. Each adds its flags to the application and, when the
// command line names it, calls one library function and prints; main wires
// them and turns exceptions into exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

namespace hzp::cli {

inline constexpr int kExitInternal = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInfeasible = 3;
/// `hzp validate cases|collectives --check`: a case or fabric outside its
/// tolerance (the model missed; not an error of the program).
inline constexpr int kExitValidationMiss = 4;
/// `hzp sweep`: every point that ran ended in an error (rows recorded).
inline constexpr int kExitEveryPointFailed = 5;

class Command {
 public:
  virtual ~Command() = default;
  [[nodiscard]] virtual bool parsed() const = 0;
  virtual int run() = 0;
  /// Where a plan problem the run raised came from: "command line" (named by
  /// flag) or the plan file it read (named by its keys).
  [[nodiscard]] virtual std::string problem_source() const { return "command line"; }
};
using Commands = std::vector<std::unique_ptr<Command>>;

/// A command that is one CLI11 subcommand and a function of its arguments.
template <class Args>
class SimpleCommand : public Command {
 public:
  using Run = int (*)(Args&);
  SimpleCommand(CLI::App* app, Run fn) : app_(app), run_(fn) {}
  [[nodiscard]] bool parsed() const override { return app_->parsed(); }
  int run() override { return run_(args); }
  Args args;

 private:
  CLI::App* app_;
  Run run_;
};

// Each adds its commands to `out` in the order they are tried (a subcommand
// of a subcommand before its parent).
void add_scenario_commands(CLI::App& app, const std::string& command_line, Commands& out);  // simulate, schedule
void add_catalog_commands(CLI::App& app, Commands& out);                                    // models, clusters, schema
void add_sweep_commands(CLI::App& app, Commands& out);       // sweep merge, sweep export, sweep
void add_plan_command(CLI::App& app, Commands& out);         // plan
void add_validate_commands(CLI::App& app, Commands& out);    // validate cases|collectives|compare, calibrate, plot
void add_collectives_command(CLI::App& app, Commands& out);  // collectives

/// Runs `hzp plot ARGS` (the compiled-in Python script); its exit code.
int run_plot(const std::vector<std::string>& args);

}  // namespace hzp::cli
