// Shared by the codegen tests: run the kernels of one entry instruction of a
// compiled module on the emulated device (runtime/emu/grid_runner.h), in
// launch order (Note [multi-kernel instructions]), on given operand values,
// and compare its results with the reference evaluator's.
//
// Every global access is checked against the launch's arguments: inside one
// of them; stores only into results and scratch; within a launch, each byte
// stored by one thread and read by no other (blocks are never ordered);
// results and scratch read only where an earlier launch of the instruction,
// or the thread itself, wrote them; and after the last launch every byte of
// every result written. Shared memory, barriers and shuffles are checked by
// the grid runner itself (Note [emulated races]).
#ifndef GPTC_TESTS_COMPILER_CODEGEN_EMU_KERNEL_RUNNER_H_
#define GPTC_TESTS_COMPILER_CODEGEN_EMU_KERNEL_RUNNER_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/lowering.h"
#include "compiler/eval/evaluator.h"
#include "compiler/support/float_bits.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/emu/kernel_library.h"

namespace gptc::codegen {

// One kernel argument's memory, with the checker's record of its bytes.
struct EmuBuffer {
  std::vector<char> bytes;
  bool writable = false;  // a result or scratch
  std::string name;       // "operand 0", "result 1", "scratch"
  // Per byte: 0 never written; else (launch << 48) | (block << 16) | (thread + 1)
  // of its last writer.
  std::unique_ptr<std::atomic<uint64_t>[]> writer;
};

class EmuAccessChecker : public rt::emu::GlobalAccessChecker {
 public:
  EmuAccessChecker(std::vector<EmuBuffer>& buffers, uint64_t launch)
      : buffers_(buffers), launch_(launch) {}

  bool Access(const void* address, uint32_t bytes, uint32_t kind,
              const rt::emu::ThreadIdentity& who, rt::emu::Findings& findings) override {
    const char* p = static_cast<const char*>(address);
    for (EmuBuffer& buffer : buffers_) {
      const char* begin = buffer.bytes.data();
      if (p < begin || p + bytes > begin + buffer.bytes.size()) continue;
      const size_t at = static_cast<size_t>(p - begin);
      const bool store = (kind & program::emu::kStore) != 0;
      if (store && !buffer.writable) {
        return findings.Add(fmt::format("{}: store into {} (+{}), which the kernel only reads",
                                        who.Describe(), buffer.name, at));
      }
      if (!buffer.writable) return true;
      const uint64_t me = (launch_ << 48) | (who.block << 16) | (who.thread + 1);
      for (uint32_t i = 0; i < bytes; ++i) {
        const uint64_t last = buffer.writer[at + i].load(std::memory_order_acquire);
        const bool this_launch = last != 0 && (last >> 48) == launch_;
        if (store) {
          if (this_launch && last != me) {
            return findings.Add(
                fmt::format("{}: store into {} (+{}), which another thread of the "
                            "launch stored (a race)",
                            who.Describe(), buffer.name, at + i));
          }
          buffer.writer[at + i].store(me, std::memory_order_release);
        } else if (last == 0) {
          return findings.Add(fmt::format("{}: load of {} (+{}), never written", who.Describe(),
                                          buffer.name, at + i));
        } else if (this_launch && last != me) {
          return findings.Add(
              fmt::format("{}: load of {} (+{}), which another thread of the "
                          "launch stored (a race)",
                          who.Describe(), buffer.name, at + i));
        }
      }
      return true;
    }
    return findings.Add(
        fmt::format("{}: access of {} bytes outside every argument", who.Describe(), bytes));
  }

 private:
  std::vector<EmuBuffer>& buffers_;
  uint64_t launch_;
};

inline std::string EncodeForDevice(const ir::Shape& shape, const std::vector<double>& values) {
  const int64_t size = ir::DTypeBytes(shape.dtype());
  std::string out(values.size() * size, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    char* to = out.data() + i * size;
    if (shape.dtype() == ir::DType::kF32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(to, &f, 4);
    } else if (shape.dtype() == ir::DType::kBF16) {
      const uint16_t h = F32ToBF16Bits(static_cast<float>(values[i]));
      std::memcpy(to, &h, 2);
    } else if (shape.dtype() == ir::DType::kS32) {  // indices
      const int32_t v = static_cast<int32_t>(values[i]);
      std::memcpy(to, &v, 4);
    } else if (shape.dtype() == ir::DType::kU16) {
      const uint16_t v = static_cast<uint16_t>(values[i]);
      std::memcpy(to, &v, 2);
    } else {
      ADD_FAILURE() << "EncodeForDevice: " << shape.ToString() << " is not f32, bf16, s32 or u16";
    }
  }
  return out;
}

inline std::vector<double> DecodeFromDevice(const ir::Shape& shape,
                                            const std::vector<char>& bytes) {
  std::vector<double> out(shape.num_elements());
  for (size_t i = 0; i < out.size(); ++i) {
    if (shape.dtype() == ir::DType::kF32) {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = BF16BitsToF32(h);
    }
  }
  return out;
}

// A hand-written kernel (its MLIR text) lowered as the emitters' kernels
// are, its host code linked into an emulator library of its own, checks on.
struct EmuTextKernel {
  LoweredKernel kernel;
  std::unique_ptr<rt::emu::KernelLibrary> library;
};
inline StatusOr<EmuTextKernel> LowerForEmulator(const std::string& mlir, const std::string& name) {
  CodegenOptions options;
  options.emit_host = true;
  options.host_symbol_prefix = "gptc_test_";
  EmuTextKernel out;
  ASSIGN_OR_RETURN(out.kernel, LowerMlirText(mlir, name, options));
  if (!out.kernel.host) return Error("kernel {}: no host code", name);
  ASSIGN_OR_RETURN(std::string bytes, LinkHostLibrary({out.kernel.host->object}));
  ASSIGN_OR_RETURN(out.library, rt::emu::KernelLibrary::Open(bytes, "the test library"));
  out.library->SetChecks(true);
  return out;
}

// The kernels of `module` (CompileFusions with their host code), linked for
// the emulator once.
class EmuKernelRunner {
 public:
  // Called on every compiled kernel (with its MLIR kept) before the library
  // is linked: a seeded defect replaces a kernel's host code.
  using Rewrite = std::function<void(CompiledKernel&)>;

  explicit EmuKernelRunner(const ir::Module& module, const Rewrite& rewrite = {},
                           AttentionMma attention_mma = AttentionMma::kMmaSync)
      : module_(module) {
    CodegenOptions options;
    options.attention_mma = attention_mma;
    options.emit_host = true;
    options.host_symbol_prefix = "gptc_emu_test_";
    options.keep_mlir = rewrite != nullptr;
    StatusOr<CompiledKernels> kernels = CompileFusions(module, options);
    if (!kernels.ok()) {
      ADD_FAILURE() << kernels.status().message();
      return;
    }
    kernels_ = std::move(kernels).value();
    if (rewrite) {
      for (CompiledKernel& k : kernels_.kernels) rewrite(k);
    }
    std::vector<std::string> objects;
    for (const CompiledKernel& k : kernels_.kernels) {
      if (k.host) objects.push_back(k.host->object);
    }
    StatusOr<std::string> bytes = LinkHostLibrary(objects);
    if (!bytes.ok()) {
      ADD_FAILURE() << bytes.status().message();
      return;
    }
    auto library = rt::emu::KernelLibrary::Open(*bytes, "the test library");
    if (!library.ok()) {
      ADD_FAILURE() << library.status().message();
      return;
    }
    library_ = std::move(library).value();
    library_->SetChecks(true);
  }

  const CompiledKernels& kernels() const { return kernels_; }

  // The specs of instruction `name`'s kernels, in launch order.
  std::vector<const KernelSpec*> Specs(const std::string& name) const {
    std::vector<const KernelSpec*> out;
    for (const CompiledKernel& k : kernels_.kernels) {
      if (k.spec.fusion == name) out.push_back(&k.spec);
    }
    return out;
  }

  // Runs instruction `name`'s kernels on `operands`; its results, one per
  // tuple element. Failures are reported to gtest.
  std::vector<eval::Literal> Run(const std::string& name,
                                 const std::vector<eval::Literal>& operands) {
    std::vector<eval::Literal> results;
    const ir::Instruction* inst = module_.entry()->FindInstruction(name);
    if (inst == nullptr || library_ == nullptr) {
      ADD_FAILURE() << "no instruction %" << name << " or no library";
      return results;
    }
    std::vector<ir::Shape> leaves;
    if (inst->shape().is_tuple()) {
      leaves = inst->shape().tuple_elements();
    } else {
      leaves.push_back(inst->shape());
    }
    // Buffers shared by the instruction's kernels: operands, results, scratch.
    std::vector<EmuBuffer> buffers;
    auto add = [&](int64_t size, bool writable, std::string what) {
      EmuBuffer b;
      b.bytes.assign(static_cast<size_t>(std::max<int64_t>(size, 1)), '\x7f');
      b.writable = writable;
      b.name = std::move(what);
      b.writer = std::make_unique<std::atomic<uint64_t>[]>(b.bytes.size());
      buffers.push_back(std::move(b));
    };
    for (size_t i = 0; i < operands.size(); ++i) {
      std::string encoded = EncodeForDevice(operands[i].shape, operands[i].values);
      add(static_cast<int64_t>(encoded.size()), false, fmt::format("operand {}", i));
      std::memcpy(buffers.back().bytes.data(), encoded.data(), encoded.size());
    }
    for (size_t r = 0; r < leaves.size(); ++r) {
      add(leaves[r].byte_size(), true, fmt::format("result {}", r));
    }
    int64_t scratch = 0;
    for (const KernelSpec* spec : Specs(name)) {
      for (const KernelParam& p : spec->params) {
        if (p.role == KernelParam::Role::kScratch) scratch = std::max(scratch, p.shape.byte_size());
      }
    }
    const size_t scratch_buffer = buffers.size();
    if (scratch > 0) add(scratch, true, "scratch");

    rt::emu::GridRunner runner(2);
    uint64_t launch = 0;
    for (const CompiledKernel& k : kernels_.kernels) {
      if (k.spec.fusion != name) continue;
      const CompiledKernel& code = k.code_of >= 0 ? kernels_.kernels[k.code_of] : k;
      std::vector<uint64_t> args;
      for (const KernelParam& p : k.spec.params) {
        size_t b = p.role == KernelParam::Role::kOperand  ? static_cast<size_t>(p.index)
                   : p.role == KernelParam::Role::kResult ? operands.size() + p.index
                                                          : scratch_buffer;
        args.push_back(reinterpret_cast<uint64_t>(buffers[b].bytes.data()));
      }
      EmuAccessChecker checker(buffers, ++launch);
      rt::emu::Launch l{
          .kernel = k.spec.name,
          .function = library_->Symbol(code.host->symbol),
          .args = std::move(args),
          .grid = {static_cast<uint32_t>(k.spec.grid.x), 1, 1},
          .block = {static_cast<uint32_t>(k.spec.block.x), 1, 1},
          .static_shared = static_cast<uint32_t>(code.host->shared_bytes),
          .dynamic_shared = static_cast<uint32_t>(k.spec.dynamic_shared_bytes),
          .uses_sync = code.host->uses_sync,
          .warpgroups = code.host->wgmmas > 0,
          .checks = true,
          .global = &checker,
      };
      Status run = runner.Run(l);
      if (!run.ok()) {
        ADD_FAILURE() << run.message();
        return results;
      }
    }
    for (size_t r = 0; r < leaves.size(); ++r) {
      const EmuBuffer& b = buffers[operands.size() + r];
      for (int64_t i = 0; i < leaves[r].byte_size(); ++i) {
        if (b.writer[i].load() == 0) {
          ADD_FAILURE() << "%" << name << ": byte " << i << " of result " << r << " left unwritten";
          break;
        }
      }
      results.push_back(
          eval::Literal{.shape = leaves[r], .values = DecodeFromDevice(leaves[r], b.bytes)});
    }
    return results;
  }

  // Runs instruction `name` (a fusion of entry parameters) on random
  // operands on the emulator and in the evaluator, and expects every result
  // within `rtol` of the evaluator's, relative to |ref| + the result's rms.
  void ExpectMatchesEvaluator(const std::string& name, double rtol = 1e-5, uint64_t seed = 1) {
    const ir::Instruction* inst = module_.entry()->FindInstruction(name);
    ASSERT_NE(inst, nullptr) << name;
    std::mt19937_64 rng(seed);
    std::vector<eval::Literal> operands;
    for (const ir::Instruction* op : inst->operands()) {
      operands.push_back(eval::Literal::Random(op->shape(), rng));
    }
    ExpectMatchesEvaluatorOn(name, operands, rtol);
  }

  // The same on the given operands.
  void ExpectMatchesEvaluatorOn(const std::string& name, const std::vector<eval::Literal>& operands,
                                double rtol = 1e-5) {
    const ir::Instruction* inst = module_.entry()->FindInstruction(name);
    ASSERT_NE(inst, nullptr) << name;
    StatusOr<eval::Literal> expected =
        eval::EvaluateComputation(*inst->called_computation(), operands);
    ASSERT_TRUE(expected.ok()) << expected.status().message();
    std::vector<eval::Literal> want;
    if (expected->shape.is_tuple()) {
      want = expected->elements;
    } else {
      want.push_back(*expected);
    }
    std::vector<eval::Literal> got = Run(name, operands);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t r = 0; r < got.size(); ++r) {
      double sum_sq = 0;
      for (double v : want[r].values) sum_sq += v * v;
      const double rms = want[r].values.empty() ? 0 : std::sqrt(sum_sq / want[r].values.size());
      const double tol = want[r].shape.dtype() == ir::DType::kBF16 ? std::max(rtol, 8e-3) : rtol;
      int failures = 0;
      for (size_t i = 0; i < got[r].values.size(); ++i) {
        const double g = got[r].values[i], e = want[r].values[i];
        if (std::abs(g - e) <= tol * (std::abs(e) + rms) || (std::isinf(e) && g == e)) continue;
        if (++failures <= 5) {
          ADD_FAILURE() << "%" << name << " result " << r << " element " << i << ": emulator " << g
                        << ", evaluator " << e;
        }
      }
      EXPECT_EQ(failures, 0) << "%" << name << " result " << r << " of " << got[r].values.size();
    }
  }

 private:
  const ir::Module& module_;
  CompiledKernels kernels_;
  std::unique_ptr<rt::emu::KernelLibrary> library_;
};

}  // namespace gptc::codegen

#endif  // GPTC_TESTS_COMPILER_CODEGEN_EMU_KERNEL_RUNNER_H_
