#include "runtime/launch_env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "compiler/support/text.h"

namespace gptc::rt {

namespace {

struct Launcher {
  const char* name;
  const char* rank;
  const char* world;
  const char* local_rank;
};

// In order of precedence (launch_env.h).
constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"MPICH/Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

// A variable's value as a non-negative integer; nullopt when unset.
StatusOr<std::optional<int64_t>> ReadCount(const GetEnvFn& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr) return std::optional<int64_t>();
  std::string_view text(value);
  // Launchers never pad, but a stray space from a hand-written script should not matter.
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  errno = 0;
  char* end = nullptr;
  const std::string s(text);
  const long long n = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || n < 0) {
    return Error("{}='{}' is not a non-negative integer", name, value);
  }
  return std::optional<int64_t>(n);
}

}  // namespace

std::string LaunchEnv::ToString() const {
  return fmt::format("rank {} of {} (local rank {}, {}), rendezvous {}:{}", rank, world_size,
                     local_rank, launcher, master_addr, master_port);
}

StatusOr<LaunchEnv> ReadLaunchEnv(const GetEnvFn& getenv_or_null) {
  const GetEnvFn getenv =
      getenv_or_null ? getenv_or_null : GetEnvFn([](const char* n) { return std::getenv(n); });
  LaunchEnv env;
  for (const Launcher& l : kLaunchers) {
    ASSIGN_OR_RETURN(std::optional<int64_t> rank, ReadCount(getenv, l.rank));
    if (!rank) {
      if (getenv(l.world) != nullptr && std::string_view(l.name) == "torchrun") {
        return Error("WORLD_SIZE is set but RANK is not (torchrun sets both)");
      }
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> world, ReadCount(getenv, l.world));
    if (!world) return Error("{} is set but {} is not ({} sets both)", l.rank, l.world, l.name);
    if (*world < 1) return Error("{}={} must be at least 1", l.world, *world);
    if (*rank >= *world) {
      return Error("{}={} is not below {}={}", l.rank, *rank, l.world, *world);
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> local, ReadCount(getenv, l.local_rank));
    if (local && *local > *rank) {
      return Error("{}={} is above {}={}", l.local_rank, *local, l.rank, *rank);
    }
    env.rank = *rank;
    env.world_size = *world;
    env.local_rank = local.value_or(*rank);
    env.launcher = l.name;
    env.world_variable = l.world;
    break;
  }
  if (const char* addr = getenv("MASTER_ADDR"); addr != nullptr) {
    if (*addr == '\0') return Error("MASTER_ADDR is set but empty");
    env.master_addr = addr;
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> port, ReadCount(getenv, "MASTER_PORT"));
  if (port) {
    if (*port < 1 || *port > 65535) {
      return Error("MASTER_PORT={} is not a TCP port (1-65535)", *port);
    }
    env.master_port = static_cast<int>(*port);
  }
  if (const char* t = getenv("GPTC_DIST_TIMEOUT"); t != nullptr) {
    char* end = nullptr;
    const double seconds = std::strtod(t, &end);
    if (*t == '\0' || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
      return Error("GPTC_DIST_TIMEOUT='{}' is not a positive number of seconds", t);
    }
    env.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
  }
  return env;
}

Status CheckWorldSize(const LaunchEnv& env, int64_t compiled_world, std::string_view artifact) {
  if (env.world_size == compiled_world) return Status::Ok();
  const std::string launched =
      env.world_variable.empty()
          ? fmt::format("launched {} (no launcher variables set)", Plural(env.world_size, "rank"))
          : fmt::format("launched {} ({}={})", Plural(env.world_size, "rank"), env.world_variable,
                        env.world_size);
  return Error(
      "{} but {} was compiled with --dp {}: launch {} ranks (mpirun -np {}) or "
      "recompile with --dp {}",
      launched, artifact, compiled_world, compiled_world, compiled_world, env.world_size);
}

RowRange RankRows(const LaunchEnv& env, int64_t rows_per_rank) {
  return RowRange{env.rank * rows_per_rank, rows_per_rank};
}

}  // namespace gptc::rt
