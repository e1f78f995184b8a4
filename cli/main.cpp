// hzp: the command line. Wires the subcommands (cli/cmd_*.cpp), runs the one
// the command line names, and is the only place exceptions become exit codes:
// 0 ok, 2 bad input, 3 infeasible plan (out of memory), 1 internal error.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "cli/commands.hpp"
#include "cli/option_flags.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/options.hpp"
#include "plan/options.hpp"

namespace {

using namespace hzp;

// A library check names option keys: a plan file's keys, or the flags.
void print_problems(const cli::Command& command, const core::ProblemError& e) {
  const std::string source = command.problem_source();
  const bool file = source != "command line";
  std::cerr << "hzp: error: " << source << ": "
            << core::one_line(core::join_problems(e.problems(),
                                                  [file](const std::string& field) {
                                                    return file && plan::find_plan_option(field)
                                                               ? field
                                                               : cli::flag_for_field(field);
                                                  }))
            << "\n";
}

int run(cli::Command& command) {
  try {
    return command.run();
  } catch (const core::ProblemError& e) {
    print_problems(command, e);
    return cli::kExitBadInput;
  } catch (const core::InputError& e) {
    std::cerr << "hzp: error: " << e.what() << "\n";
    return cli::kExitBadInput;
  } catch (const core::InfeasibleError& e) {
    std::cerr << "hzp: infeasible: " << e.what() << "\n";
    return cli::kExitInfeasible;
  } catch (const std::exception& e) {
    std::cerr << fmt::format(
        "hzp: internal error: {}\nThis is a bug in hzp {} ({}); please report it with the command line above.\n",
        e.what(), core::version(), core::git_revision());
    return cli::kExitInternal;
  }
}

// The help of the (sub)command the parse reached: "hzp validate cases --help".
std::string help_of(CLI::App& app) {
  std::string path = "hzp";
  CLI::App* at = &app;
  for (std::vector<CLI::App*> parsed = at->get_subcommands(); !parsed.empty(); parsed = at->get_subcommands()) {
    at = parsed.front();
    path += " " + at->get_name();
  }
  return path + " --help";
}

// Plan search, sweeps and cases build and drop one Schedule after another,
// each of many megabytes. glibc would hand each one's large vectors back to
// the kernel (mmap above 128 KiB, trimming the heap's top above 128 KiB) and
// take them again zeroed page by page for the next: 4.7 of 39 CPU seconds of
// an exhaustive plan search were the kernel's page faults. Kept in the heap
// instead: the process holds its peak, which it needed anyway.
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  CLI::App app{"hzp: predict one training step of a transformer on a GPU cluster under a sharding plan"};
  app.set_version_flag("--version", fmt::format("hzp {} ({})", core::version(), core::git_revision()));
  app.require_subcommand(1);
  cli::Commands commands;
  cli::add_scenario_commands(app, command_line, commands);
  cli::add_catalog_commands(app, commands);
  cli::add_sweep_commands(app, commands);
  cli::add_plan_command(app, commands);
  cli::add_validate_commands(app, commands);
  cli::add_collectives_command(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // `--json -` reads as "JSON to standard output", which --json alone is.
    std::string hint;
    for (int i = 1; i + 1 < argc; ++i) {
      if (std::string(argv[i]) == "--json" && std::string(argv[i + 1]) == "-") {
        hint = "; --json takes no value: it prints the summary as JSON on standard output (--summary - does too)";
      }
    }
    std::cerr << "hzp: error: command line: " << e.what() << hint << " (see " << help_of(app) << ")\n";
    return cli::kExitBadInput;
  }
  for (auto& command : commands) {
    if (command->parsed()) return run(*command);
  }
  return cli::kExitInternal;
}
