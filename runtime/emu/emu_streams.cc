// The emulated device's stream engine (Note [emulated streams] in
// emu_device.h, Note [stream order] in memory_checker.h): running or
// recording an operation on a stream, what each party knows of the others,
// and the device's errors. Its CUDA runtime (emu_device.cc) and its
// operations (emu_ops.cc) both build on it; it calls neither.
#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/emu/emu_state.h"

namespace gptc::rt::emu {

using State = EmuDevice::State;

Stream* ToStream(State& d, cudaStream_t stream) {
  if (stream == nullptr) return d.streams[0].get();
  auto* s = reinterpret_cast<Stream*>(stream);
  for (const auto& known : d.streams) {
    if (known.get() == s) return s->destroyed ? nullptr : s;
  }
  return nullptr;
}

StreamPosition Position(Stream& s) { return StreamPosition{s.id, &s.known}; }

ThunkContext TakeThunk(Stream& s) {
  ThunkContext ctx = s.pending;
  s.pending = ThunkContext{};
  return ctx;
}

void Learn(State& d, std::vector<uint64_t>& to, const std::vector<uint64_t>& from, int owner) {
  if (to.size() < from.size()) to.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) to[i] = std::max(to[i], from[i]);
  // Note [in-flight all-reduces]: what another party now waits for lands.
  for (size_t i = 0; i < d.landings.size();) {
    const Landing& l = d.landings[i];
    if (l.stream != owner && static_cast<size_t>(l.stream) < to.size() && to[l.stream] >= l.clock) {
      std::function<void()> land = std::move(d.landings[i].land);
      d.landings.erase(d.landings.begin() + static_cast<std::ptrdiff_t>(i));
      land();
    } else {
      ++i;
    }
  }
}

cudaError_t Execute(Stream& s, const OpFn& op) {
  State& d = *s.device;
  if (d.sticky != cudaSuccess) return d.sticky;
  // Note [stream order]: the op comes after all the host has seen end; the
  // legacy stream after every blocking stream's work, and they after its.
  Learn(d, s.known, d.host_known, s.id);
  if (s.id == 0) {
    for (auto& b : d.streams) {
      if (b->id != 0 && b->blocking) Learn(d, s.known, b->known, s.id);
    }
  } else if (s.blocking) {
    Learn(d, s.known, d.streams[0]->known, s.id);
  }
  if (s.known.size() <= static_cast<size_t>(s.id)) s.known.resize(s.id + 1, 0);
  s.known[s.id] = ++s.clock;
  return op(s);
}

cudaError_t Enqueue(Stream& s, OpFn op) {
  if (Graph* g = s.capture; g != nullptr) {
    if (g->invalid)
      return Fail(*s.device, cudaErrorStreamCaptureInvalidated,
                  "the capture was invalidated by " + g->why);
    g->last_op[&s] = g->ops.size();
    g->ops.push_back(GraphOp{&s, std::move(op)});
    return cudaSuccess;
  }
  return Execute(s, op);
}

cudaError_t Fail(State& d, cudaError_t code, std::string message, bool sticky) {
  d.last_error = code;
  d.last_message = std::move(message);
  if (sticky) d.sticky = code;
  return code;
}

std::string Describe(const ThunkContext& ctx) {
  if (ctx.plan == nullptr) return "";
  return fmt::format("entry {} {}", ctx.plan->name(), ctx.get()->Describe());
}

cudaError_t Finding(State& d, const ThunkContext& ctx, const std::string& what,
                    const Status& status) {
  std::string message(status.message());
  if (ctx.plan != nullptr && !message.starts_with("entry "))
    message = Describe(ctx) + ": " + message;
  if (!what.empty() && ctx.plan == nullptr && !message.starts_with(what)) {
    message = what + ": " + message;
  }
  return Fail(d, cudaErrorIllegalAddress, "emulator: " + message, /*sticky=*/true);
}

bool LastOfInstruction(const ThunkContext& ctx) {
  const std::vector<gpu::Thunk>& thunks = ctx.plan->thunks;
  const size_t next = static_cast<size_t>(ctx.thunk) + 1;
  return next == thunks.size() || thunks[next].instruction() != thunks[ctx.thunk].instruction();
}

}  // namespace gptc::rt::emu
