// dp_peer: one rank of a data-parallel group as a real process, for
// tests/runtime/dp_process_test.cc. Reads its rank from the launch
// environment (runtime/launch_env.h), joins the rendezvous, then by MODE:
//   sum   all-reduces 1000 floats (rank-dependent), prints "rank R checksum C"
//   die   kills itself with SIGKILL right after the rendezvous (a crash)
// Errors: one line on stderr, exit 1.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/launch_env.h"
#include "runtime/rendezvous.h"

namespace gptc::rt {
namespace {

Status Main(const std::string& mode) {
  ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
  ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rdv, Rendezvous::Join(RendezvousOptionsFrom(env)));
  if (mode == "die") std::raise(SIGKILL);
  std::unique_ptr<Communicator> comm = MakeTcpCommunicator(std::move(rdv), env.timeout);
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(env.rank + 1) / (i + 3.0f);
  Status s = comm->AllReduce(ir::ReduceKind::kSum, std::span(v));
  if (!s.ok()) return s;
  double checksum = 0;
  for (float x : v) checksum += x;
  std::printf("rank %lld checksum %.9g\n", static_cast<long long>(env.rank), checksum);
  return comm->Barrier();
}

}  // namespace
}  // namespace gptc::rt

int main(int argc, char** argv) {
  gptc::Status s = gptc::rt::Main(argc > 1 ? argv[1] : "sum");
  if (!s.ok()) {
    std::fprintf(stderr, "dp_peer: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
