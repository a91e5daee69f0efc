#include "compiler/perf/h100.h"

#include <algorithm>

namespace gptc::perf {
namespace {

InstTiming Make(Pipe pipe, int issue, int pipe_clocks, int latency, Wait wait) {
  return InstTiming{pipe, static_cast<uint8_t>(issue), static_cast<uint16_t>(pipe_clocks),
                    static_cast<uint16_t>(latency), wait};
}

InstTiming Free() { return Make(Pipe::kNone, 0, 0, 0, Wait::kNone); }

// `slots` integer-pipe instructions (half rate: 2 clocks each).
InstTiming Alu(int slots, const MachineModel& m) {
  return Make(Pipe::kAlu, slots, 2 * slots, m.alu_latency, Wait::kFixed);
}

InstTiming Move(const PtxInst& in, const MachineModel& m) {
  for (const PtxOperand& o : in.srcs) {
    if (o.kind == PtxOperand::kSpecial) {  // S2R
      return Make(Pipe::kAlu, 1, 2, m.special_register_latency, Wait::kShort);
    }
  }
  return Free();  // register allocation or an immediate operand
}

InstTiming Convert(const PtxInst& in, const MachineModel& m) {
  if (IsFloat(in.type) || IsFloat(in.type2)) {
    // Widening bf16/f16 to f32 is a shift or a byte permute.
    if (in.type == PtxType::kF32 && (in.type2 == PtxType::kBf16 || in.type2 == PtxType::kF16)) {
      return Alu(1, m);
    }
    return Make(Pipe::kConvert, 1, 8, m.mufu_latency, Wait::kShort);
  }
  const int to = TypeBits(in.type), from = TypeBits(in.type2);
  if (to == 64 && from < 64 && !IsSigned(in.type2)) return Free();  // the high word is RZ
  if (to < 64 && from == 64) return Free();                         // the low word
  return Alu(1, m);
}

// Loads, stores, shuffles and the rest of the shared-memory path; a
// request's clocks and latency depend on its bytes (kernel_model.cc).
InstTiming Memory(const PtxInst& in, const MachineModel& m) {
  switch (in.op) {
    case PtxOp::kLd:
      if (in.space == PtxSpace::kParam || in.space == PtxSpace::kConst) {
        return Free();  // a constant-bank operand
      }
      return Make(Pipe::kMio, 1, 0, 0, Wait::kLong);
    case PtxOp::kLdmatrix:
      return Make(Pipe::kMio, 1, 0, m.ldmatrix_latency, Wait::kShort);
    case PtxOp::kShfl:
      return Make(Pipe::kMio, 1, 1, m.shuffle_latency, Wait::kShort);
    default:  // st, atom, cp.async
      return Make(Pipe::kMio, 1, 0, 0, Wait::kLong);
  }
}

InstTiming Tensor(const PtxInst& in, const MachineModel& m) {
  if (in.op == PtxOp::kWgmma) {
    // Asynchronous: the simulator holds the warpgroup's four pipes.
    return Make(Pipe::kTensor, 1, 0, 0, Wait::kTensor);
  }
  const double products = static_cast<double>(std::max<int>(in.m, 1)) * in.n * in.k / 2048.0;
  const int clocks = static_cast<int>(std::max(1.0, products * m.mma_clocks));
  return Make(Pipe::kTensor, 1, clocks, m.mma_latency + clocks - static_cast<int>(m.mma_clocks),
              Wait::kTensor);
}

// The special-function unit, and the sequences an IEEE rcp, sqrt or
// division becomes.
InstTiming SpecialFunction(const PtxInst& in, const MachineModel& m) {
  const bool f32 = in.type == PtxType::kF32;
  if (in.op == PtxOp::kDiv) {
    return Make(Pipe::kMufu, in.approx ? 2 : 8, 8,
                in.approx ? m.mufu_latency + 4 : m.division_latency, Wait::kShort);
  }
  if (!in.approx && f32) return Make(Pipe::kMufu, 8, 8, m.division_latency, Wait::kShort);
  return Make(Pipe::kMufu, 1, 8, m.mufu_latency, Wait::kShort);
}

InstTiming Arithmetic(const PtxInst& in, const MachineModel& m) {
  const bool wide64 = TypeBits(in.type) == 64;
  if (IsFloat(in.type)) {
    return Make(Pipe::kFma, 1, in.type == PtxType::kF64 ? 16 : 1, m.alu_latency, Wait::kFixed);
  }
  if ((in.op == PtxOp::kMul || in.op == PtxOp::kMad) && wide64 && !in.wide) return Alu(3, m);
  return Alu(wide64 && !in.wide ? 2 : 1, m);
}

}  // namespace

const MachineModel& H100() {
  static const MachineModel kH100;
  return kH100;
}

InstTiming TimingOf(const PtxInst& in, const MachineModel& m) {
  switch (in.op) {
    case PtxOp::kMov:
    case PtxOp::kCvta:
      return Move(in, m);
    case PtxOp::kCvt:
      return Convert(in, m);
    case PtxOp::kLd:
    case PtxOp::kSt:
    case PtxOp::kAtom:
    case PtxOp::kCpAsync:
    case PtxOp::kLdmatrix:
    case PtxOp::kShfl:
      return Memory(in, m);
    case PtxOp::kMma:
    case PtxOp::kWgmma:
      return Tensor(in, m);
    case PtxOp::kMufu:
      return SpecialFunction(in, m);
    case PtxOp::kDiv:
    case PtxOp::kRem:
      if (IsFloat(in.type)) return SpecialFunction(in, m);
      return Alu(TypeBits(in.type) == 64 ? 40 : 20, m);  // integer division by a register
    case PtxOp::kAdd:
    case PtxOp::kSub:
    case PtxOp::kMul:
    case PtxOp::kMad:
    case PtxOp::kFma:
    case PtxOp::kNeg:
    case PtxOp::kAbs:
      return Arithmetic(in, m);
    case PtxOp::kSetp:
      return Alu(TypeBits(in.type2) == 64 ? 2 : 1, m);
    case PtxOp::kMin:
    case PtxOp::kMax:
    case PtxOp::kSelp:
    case PtxOp::kAnd:
    case PtxOp::kOr:
    case PtxOp::kXor:
    case PtxOp::kNot:
    case PtxOp::kShl:
    case PtxOp::kShr:
    case PtxOp::kBfe:
      return Alu(TypeBits(in.type) == 64 ? 2 : 1, m);
    case PtxOp::kOther:
      return Alu(1, m);
    default:  // barriers, fences, group commits and waits, branches, returns
      return Make(Pipe::kNone, 1, 0, 0, Wait::kNone);
  }
}

}  // namespace gptc::perf
