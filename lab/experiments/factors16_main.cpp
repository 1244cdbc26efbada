// kda-lab-factors16: the 16-token factor builder (factors16.h), checked and timed.
//   check   three small packed problems (contract gates with a huge and a zero q row; long-memory
//           gates; every channel at the steepest decay the contract allows, where the anchors'
//           +-68 range is used up): every factor of every sub-chunk against the float64
//           reference's 16-token chunk traces (kda::ref::chunked_forward, chunk_size 16), and the
//           record's rows >= n exactly zero; the 16-token forward (factors16 then the chain)
//           against the float64 forward, and the one-kernel forward (fused16.h) against both: bit
//           for bit against the two-kernel one, within the contract's gate against float64.
//   time    the contract shapes' sizes (h96 / h64, one 8192-token sequence or eight of 1024): the
//           factor builder writing its records, the same with every CTA writing one record (the
//           stores absorbed by L2: the fused kernel's cost, whose factors stay on chip), and the
//           library's 64-token PREP (kda::chunk_forward_stage 0, fused q norm) on the same inputs,
//           the chain, both, and the one-kernel forward, interleaved in one loop; medians.
// Exit codes: 0 done, 1 a factor outside its budget, 2 bad usage, 3 no usable GPU or a CUDA / kda
// error.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "factors16.h"
#include "factors16_inputs.h"
#include "kda/kda.h"
#include "kda/ref/reference.h"
#include "fused16.h"
#include "scan16.h"

namespace {

namespace f16 = kda::lab::factors16;

[[noreturn]] void cuda_fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "kda-lab-factors16: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(3);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(what, e);
}

template <class T>
T* device_alloc(size_t count, const char* what) {
  void* p = nullptr;
  check(cudaMalloc(&p, count * sizeof(T)), what);
  return static_cast<T*>(p);
}
template <class T>
T* device_copy(const std::vector<T>& host, const char* what) {
  T* p = device_alloc<T>(host.size(), what);
  check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  return p;
}

float to_bf16_value(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
float bf16_bits_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &word, 4);
  return x;
}

// ---- check

struct CheckCase {
  const char* name;
  double dt_lo, dt_hi;  // dt_bias ~ U(dt_lo, dt_hi)
  double lower_bound;
  bool odd_q_rows;  // one huge q row (its fp32 sum of squares overflows) and one zero row
};

// Error of one factor over all sub-chunks: sum of squares of error and reference, max |error|,
// max |reference|.
struct Error {
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  void add(double got, double want) {
    const double e = got - want;
    err2 += e * e;
    ref2 += want * want;
    max_err = std::max(max_err, std::fabs(e));
    max_ref = std::max(max_ref, std::fabs(want));
  }
  double rel_rms() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
  double rel_max() const { return max_ref > 0 ? max_err / max_ref : max_err; }
};

// Budgets (relative RMS, relative max) against float64. The roundings: the record's bf16 factors
// 2^-9 (U fp32), bf16 gram operands 2^-9 per element, summed over 128 channels with random
// signs, T through fp16 / bf16 operands; what this tool has measured is in docs/perf-notes.md
// ("The 16-token factor builder" onwards).
constexpr double kRmsBudget = 4e-3;
constexpr double kMaxBudget = 2e-2;
// The forward's outputs and final state: the contract's gate (kda-forward.md §9.1).
constexpr double kForwardRmsBudget = 5e-3;

bool run_check(const CheckCase& c, uint64_t seed) {
  const std::vector<int32_t> cu = {0, 0, 1, 16, 33, 97, 200, 200, 330, 394};
  const int heads = 3, dim = 128;
  const int64_t tokens = cu.back();
  const int num_seqs = static_cast<int>(cu.size()) - 1;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t elems = tokens * heads * dim;
  std::vector<float> q(elems), k(elems), v(elems), raw(elems), beta(tokens * heads);
  for (auto& x : q) x = to_bf16_value(static_cast<float>(normal(rng)));
  for (auto& x : v) x = to_bf16_value(static_cast<float>(normal(rng)));
  for (int64_t row = 0; row < tokens * heads; ++row) {  // k: normalized, then bf16
    double ssq = 0;
    std::vector<double> x(dim);
    for (int d = 0; d < dim; ++d) ssq += (x[d] = normal(rng)) * x[d];
    for (int d = 0; d < dim; ++d) k[row * dim + d] = to_bf16_value(static_cast<float>(x[d] / std::sqrt(ssq)));
  }
  if (c.odd_q_rows) {
    for (int d = 0; d < dim; ++d) {
      q[(40 * heads + 1) * dim + d] = to_bf16_value(static_cast<float>(1e30 * normal(rng)));
      q[(41 * heads + 2) * dim + d] = 0.0f;
    }
  }
  for (auto& x : raw) x = to_bf16_value(static_cast<float>(normal(rng)));
  std::uniform_real_distribution<double> u01(0.0, 1.0), dt(c.dt_lo, c.dt_hi);
  std::vector<float> a_log(heads), dt_bias(heads * dim);
  for (auto& x : a_log) x = static_cast<float>(u01(rng));
  for (auto& x : dt_bias) x = static_cast<float>(dt(rng));
  for (auto& x : beta) x = static_cast<float>(1.0 / (1.0 + std::exp(-normal(rng))));
  const std::vector<float> gate64 =
      kda::ref::gate_cumsum<double>(raw, a_log, dt_bias, 1, tokens, heads, dim, c.lower_bound, cu, 64);
  // The same gate, local to 16-token chunks, for the reference (differences in float64).
  std::vector<float> gate16(elems);
  for (int s = 0; s < num_seqs; ++s) {
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) {
      const int64_t local = t - cu[s];
      for (int64_t hd = 0; hd < heads * dim; ++hd) {
        // The gate at the row before the 16-token chunk; 0 where it starts a 64-token chunk.
        const int64_t sub = local / 16;
        const double before =
            sub % 4 == 0 ? 0.0 : gate64[(cu[s] + 16 * sub - 1) * heads * dim + hd];
        gate16[t * heads * dim + hd] =
            static_cast<float>(static_cast<double>(gate64[t * heads * dim + hd]) - before);
      }
    }
  }

  kda::ref::Problem p;
  p.batch = 1;
  p.tokens = tokens;
  p.heads = heads;
  p.cu_seqlens = cu;
  p.q = q;
  p.k = k;
  p.v = v;
  p.gate = gate16;
  p.beta = beta;
  p.initial_state.resize(static_cast<size_t>(num_seqs) * heads * dim * dim);
  for (auto& x : p.initial_state) x = static_cast<float>(0.5 * normal(rng));
  kda::ref::Options o;
  o.normalize_q = true;
  o.final_state = true;
  o.chunk_size = 16;
  std::vector<kda::ref::ChunkTrace<double>> traces;
  const kda::ref::Result<double> want = kda::ref::chunked_forward<double>(p, o, &traces);

  // The kernel on the same inputs (bf16 q, k, v; the 64-local gate).
  auto bf16_of = [](const std::vector<float>& x) {
    std::vector<__nv_bfloat16> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = __float2bfloat16_rn(x[i]);
    return y;
  };
  const int64_t capacity = f16::slot_capacity(tokens, num_seqs);
  f16::Args a{};
  a.q = device_copy(bf16_of(q), "q");
  a.k = device_copy(bf16_of(k), "k");
  a.v = device_copy(bf16_of(v), "v");
  a.gate = device_copy(gate64, "gate");
  a.beta = device_copy(beta, "beta");
  a.q_stride = a.k_stride = a.v_stride = heads * dim;
  a.heads = heads;
  a.cu = device_copy(cu, "cu");
  a.num_seqs = num_seqs;
  a.capacity = capacity;
  const size_t record_bytes = static_cast<size_t>(capacity) * heads * f16::kRecordBytes;
  a.records = device_alloc<char>(record_bytes, "records");
  check(cudaMemset(a.records, 0xff, record_bytes), "poison records");  // NaN in bf16 and fp32
  a.on_chip = false;
  a.fuse_q_l2norm = true;
  check(f16::launch(a, nullptr), "factors16 launch");
  check(cudaDeviceSynchronize(), "factors16");
  std::vector<char> rec(record_bytes);
  check(cudaMemcpy(rec.data(), a.records, record_bytes, cudaMemcpyDeviceToHost), "records");
  // The chain on those records: the whole 16-token forward.
  f16::ChainArgs ca{};
  ca.records = a.records;
  ca.capacity = capacity;
  ca.heads = heads;
  ca.cu = a.cu;
  ca.num_seqs = num_seqs;
  ca.out = device_alloc<__nv_bfloat16>(elems, "out");
  ca.out_stride = heads * dim;
  ca.initial_state = device_copy(p.initial_state, "initial state");
  ca.final_state = device_alloc<float>(p.initial_state.size(), "final state");
  check(cudaMemset(ca.out, 0xff, elems * 2), "poison out");  // NaN
  check(cudaMemset(ca.final_state, 0xff, p.initial_state.size() * 4), "poison final state");
  check(f16::launch_chain(ca, nullptr), "chain launch");
  check(cudaDeviceSynchronize(), "chain");
  std::vector<__nv_bfloat16> out(elems);
  std::vector<float> final_state(p.initial_state.size());
  check(cudaMemcpy(out.data(), ca.out, elems * 2, cudaMemcpyDeviceToHost), "out");
  check(cudaMemcpy(final_state.data(), ca.final_state, final_state.size() * 4,
                   cudaMemcpyDeviceToHost),
        "final state");
  // The one-kernel forward on the same inputs in every configuration (1, 2 or 3 builders), with and
  // without delayed hand-overs: the same bits as factors16 then the chain.
  f16::FusedArgs fa{};
  fa.in = a;
  fa.out = ca.out;
  fa.out_stride = ca.out_stride;
  fa.initial_state = ca.initial_state;
  fa.final_state = ca.final_state;
  std::vector<__nv_bfloat16> fused_out(elems);
  std::vector<float> fused_state(p.initial_state.size());
  bool fused_same = true;
  struct FusedRun {
    int builders, jitter_ns;
  };
  // The error rows below are two builders'; the stress runs make every hand-over late on one side.
  for (const FusedRun run : {FusedRun{2, 0}, FusedRun{1, 0}, FusedRun{3, 0}, FusedRun{2, 3000},
                             FusedRun{1, 3000}, FusedRun{3, 3000}}) {
    const int builders = run.builders;
    fa.jitter_ns = run.jitter_ns;
    check(cudaMemset(fa.out, 0xff, elems * 2), "poison out");
    check(cudaMemset(fa.final_state, 0xff, p.initial_state.size() * 4), "poison final state");
    check(f16::launch_fused(fa, builders, nullptr), "fused16 launch");
    check(cudaDeviceSynchronize(), "fused16");
    std::vector<__nv_bfloat16> fo(elems);
    std::vector<float> fst(p.initial_state.size());
    check(cudaMemcpy(fo.data(), fa.out, elems * 2, cudaMemcpyDeviceToHost), "fused out");
    check(cudaMemcpy(fst.data(), fa.final_state, fst.size() * 4, cudaMemcpyDeviceToHost),
          "fused final state");
    const bool same = std::memcmp(fo.data(), out.data(), elems * 2) == 0 &&
                      std::memcmp(fst.data(), final_state.data(), fst.size() * 4) == 0;
    std::printf("fused16 with %d builder%s, hand-overs delayed up to %d ns: outputs and final "
                "state %s factors16 then the chain's, bit for bit\n",
                builders, builders == 1 ? "" : "s", run.jitter_ns, same ? "equal" : "DIFFER FROM");
    fused_same = fused_same && same;
    if (builders == 2 && run.jitter_ns == 0) {
      fused_out = fo;
      fused_state = fst;
    }
  }
  // The L2 helpers on the same inputs (27 chains: helper CTAs on the SMs left build most
  // sub-chunks): with helpers, with one (it claims across all chains), with none, each also with
  // every hand-over delayed; the same bits.
  struct L2Run {
    int helper_ctas, jitter_ns;
  };
  for (const L2Run run : {L2Run{-1, 0}, L2Run{1, 0}, L2Run{0, 0}, L2Run{-1, 3000},
                          L2Run{1, 3000}, L2Run{0, 3000}}) {
    fa.jitter_ns = run.jitter_ns;
    check(cudaMemset(fa.out, 0xff, elems * 2), "poison out");
    check(cudaMemset(fa.final_state, 0xff, p.initial_state.size() * 4), "poison final state");
    check(f16::launch_l2_helpers(fa, run.helper_ctas, nullptr), "L2 helpers launch");
    std::vector<__nv_bfloat16> fo(elems);
    std::vector<float> fst(p.initial_state.size());
    check(cudaMemcpy(fo.data(), fa.out, elems * 2, cudaMemcpyDeviceToHost), "L2 helpers out");
    check(cudaMemcpy(fst.data(), fa.final_state, fst.size() * 4, cudaMemcpyDeviceToHost),
          "L2 helpers final state");
    const bool same = std::memcmp(fo.data(), out.data(), elems * 2) == 0 &&
                      std::memcmp(fst.data(), final_state.data(), fst.size() * 4) == 0;
    std::printf("L2 helpers with %s helper CTAs, hand-overs delayed up to %d ns: outputs and "
                "final state %s factors16 then the chain's, bit for bit\n",
                run.helper_ctas < 0 ? "all free SMs'" : std::to_string(run.helper_ctas).c_str(),
                run.jitter_ns, same ? "equal" : "DIFFER FROM");
    fused_same = fused_same && same;
  }
  fa.jitter_ns = 0;
  // Raw inputs (the raw gate activated by the builders, its running sums handed between builds):
  // the library's raw kernel (one CTA a chain, V_new's bf16 pair) once, then the L2 helpers (with
  // helpers, one, none) and the value halves, each also with every hand-over delayed: the same
  // bits as that kernel's. These stress the running sums' hand-overs (L2GateCarry's tagged global
  // words, PairCarry's bulk copies), which a late build shows as different bits or a hang.
  {
    namespace onepass = kda::detail::onepass;
    f16::FusedArgs fr = fa;
    __nv_bfloat16* raw_gate = device_copy(bf16_of(raw), "raw gate");
    float* d_a_log = device_copy(a_log, "A_log");
    float* d_dt_bias = device_copy(dt_bias, "dt_bias");
    fr.raw.gate = raw_gate;
    fr.raw.beta = a.beta;  // probabilities, fp32
    fr.raw.raw_gate = true;
    fr.raw.gate_bf16 = true;
    fr.raw.a_log = d_a_log;
    fr.raw.dt_bias = d_dt_bias;
    fr.raw.lower_bound = static_cast<float>(c.lower_bound);
    fr.operands = onepass::ChainOperands::bf16_vnew_pairs;
    const auto run_raw = [&](const char* what, int jitter_ns, const auto& launch) {
      fr.jitter_ns = jitter_ns;
      check(cudaMemset(fr.out, 0xff, elems * 2), "poison out");
      check(cudaMemset(fr.final_state, 0xff, p.initial_state.size() * 4), "poison final state");
      check(launch(), what);
      check(cudaDeviceSynchronize(), what);
      std::pair<std::vector<__nv_bfloat16>, std::vector<float>> r{
          std::vector<__nv_bfloat16>(elems), std::vector<float>(p.initial_state.size())};
      check(cudaMemcpy(r.first.data(), fr.out, elems * 2, cudaMemcpyDeviceToHost), "raw out");
      check(cudaMemcpy(r.second.data(), fr.final_state, r.second.size() * 4,
                       cudaMemcpyDeviceToHost),
            "raw final state");
      return r;
    };
    const auto reference = run_raw("raw one pass", 0, [&] { return onepass::launch(fr, nullptr); });
    const auto same_bits = [&](const auto& x) {  // bit patterns, not values (NaN, -0)
      return std::memcmp(x.first.data(), reference.first.data(), elems * 2) == 0 &&
             std::memcmp(x.second.data(), reference.second.data(), x.second.size() * 4) == 0;
    };
    for (const int jitter : {0, 3000}) {
      for (const int helpers : {-1, 1, 0}) {
        const auto got = run_raw("raw L2 helpers", jitter,
                                 [&] { return f16::launch_l2_helpers(fr, helpers, nullptr); });
        const bool same = same_bits(got);
        std::printf("raw inputs, L2 helpers with %s helper CTAs, hand-overs delayed up to %d ns: "
                    "outputs and final state %s the one pass's raw kernel, bit for bit\n",
                    helpers < 0 ? "all free SMs'" : std::to_string(helpers).c_str(), jitter,
                    same ? "equal" : "DIFFER FROM");
        fused_same = fused_same && same;
      }
      const auto halves = run_raw("raw value halves", jitter,
                                  [&] { return onepass::launch_value_halves(fr, nullptr); });
      const bool same = same_bits(halves);
      std::printf("raw inputs, value halves, hand-overs delayed up to %d ns: outputs and final "
                  "state %s the one pass's raw kernel, bit for bit\n",
                  jitter, same ? "equal" : "DIFFER FROM");
      fused_same = fused_same && same;
    }
    for (const void* ptr : {static_cast<const void*>(raw_gate), static_cast<const void*>(d_a_log),
                            static_cast<const void*>(d_dt_bias)}) {
      check(cudaFree(const_cast<void*>(ptr)), "cudaFree");
    }
  }
  for (const void* ptr : {static_cast<const void*>(ca.out), static_cast<const void*>(ca.initial_state),
                          static_cast<const void*>(ca.final_state)}) {
    check(cudaFree(const_cast<void*>(ptr)), "cudaFree");
  }
  for (const void* ptr : {static_cast<const void*>(a.q), static_cast<const void*>(a.k),
                          static_cast<const void*>(a.v), static_cast<const void*>(a.gate),
                          static_cast<const void*>(a.beta), static_cast<const void*>(a.cu),
                          static_cast<const void*>(a.records)}) {
    check(cudaFree(const_cast<void*>(ptr)), "cudaFree");
  }

  Error ew, eqp, ekg, eu, eaqk, ea;
  int64_t nonzero_tail = 0, sub_chunks = 0;
  for (const auto& t : traces) {
    const int64_t slot = cu[t.sequence] / 16 + t.sequence + t.chunk;
    const char* r = rec.data() + (t.head * capacity + slot) * f16::kRecordBytes;
    auto bf16_at = [&](int64_t offset) {
      uint16_t bits;
      std::memcpy(&bits, r + offset, 2);
      return static_cast<double>(bf16_bits_to_float(bits));
    };
    auto f32_at = [&](int64_t offset) {
      float x;
      std::memcpy(&x, r + offset, 4);
      return static_cast<double>(x);
    };
    const int n = static_cast<int>(t.rows);
    ++sub_chunks;
    for (int i = 0; i < 16; ++i) {
      for (int d = 0; d < dim; ++d) {
        const double w = bf16_at(f16::rec_split(f16::kRecW, i, d)),
                     qp = bf16_at(f16::rec_split(f16::kRecQP, i, d)),
                     kg = bf16_at(f16::rec_split(f16::kRecKG, i, d)), u = f32_at(f16::rec_ut(d, i));
        if (i >= n) {
          nonzero_tail += (w != 0) + (qp != 0) + (kg != 0) + (u != 0);
          continue;
        }
        ew.add(w, t.W(i, d));
        eqp.add(qp, t.q_prime(i, d));
        ekg.add(kg, t.kg(i, d));
        eu.add(u, t.U(i, d));
      }
      for (int j = 0; j < 16; ++j) {
        const double x = bf16_at(f16::rec_aqk(i, j));
        if (i >= n || j > i) {
          nonzero_tail += x != 0;
        } else {
          eaqk.add(x, t.A_qk(i, j));
        }
      }
    }
    for (int d = 0; d < dim; ++d) {  // A = 2^(G16 at row n - 1)
      const double g = gate16[(t.first_token + n - 1) * heads * dim + t.head * dim + d];
      ea.add(f32_at(f16::rec_a(d)), std::exp2(g));
    }
  }
  Error eout, estate, efout, efstate;
  for (size_t i = 0; i < out.size(); ++i) eout.add(__bfloat162float(out[i]), want.out[i]);
  for (size_t i = 0; i < final_state.size(); ++i) estate.add(final_state[i], want.final_state[i]);
  for (size_t i = 0; i < out.size(); ++i) efout.add(__bfloat162float(fused_out[i]), want.out[i]);
  for (size_t i = 0; i < final_state.size(); ++i) {
    efstate.add(fused_state[i], want.final_state[i]);
  }
  bool ok = nonzero_tail == 0 && sub_chunks > 0 && fused_same;
  std::printf("check %s: %lld sub-chunks, record entries at rows >= n or above the diagonal not zero: %lld\n",
              c.name, static_cast<long long>(sub_chunks), static_cast<long long>(nonzero_tail));
  std::printf("| factor | rel-RMS | max err / max ref | max ref |\n|---|---:|---:|---:|\n");
  const std::pair<const char*, const Error*> rows[] = {{"W", &ew},    {"U", &eu},     {"QP", &eqp},
                                                        {"KG", &ekg}, {"AQK", &eaqk}, {"A", &ea},
                                                        {"forward: out", &eout},
                                                        {"forward: final state", &estate},
                                                        {"forward (fused16, 2 builders): out", &efout},
                                                        {"forward (fused16, 2 builders): final state", &efstate}};
  for (const auto& [name, e] : rows) {
    const bool forward = std::strncmp(name, "forward", 7) == 0;
    const bool in = e->rel_rms() <= (forward ? kForwardRmsBudget : kRmsBudget) &&
                    e->rel_max() <= kMaxBudget && std::isfinite(e->err2);
    ok = ok && in;
    std::printf("| %s | %.3e | %.3e | %.3e |%s\n", name, e->rel_rms(), e->rel_max(), e->max_ref,
                in ? "" : " OUT OF BUDGET");
  }
  std::printf("\n");
  return ok;
}

// ---- time

struct TimeShape {
  const char* name;
  int heads;
  int num_seqs;  // sequences of 8192 / num_seqs tokens
};

double median(std::vector<float> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

void run_time(const TimeShape& s, bool long_memory, int warmup, int runs, uint64_t seed) {
  const int64_t tokens = 8192;
  const int dim = 128;
  f16::InputBuffers in{};
  const size_t elems = static_cast<size_t>(tokens) * s.heads * dim;
  in.q = device_alloc<__nv_bfloat16>(elems, "q");
  in.k = device_alloc<__nv_bfloat16>(elems, "k");
  in.v = device_alloc<__nv_bfloat16>(elems, "v");
  in.gate = device_alloc<float>(elems, "gate");
  in.beta = device_alloc<float>(static_cast<size_t>(tokens) * s.heads, "beta");
  in.tokens = tokens;
  in.heads = s.heads;
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  check(f16::fill_inputs(in, long_memory, seed, stream), "fill_inputs");
  std::vector<int32_t> cu(s.num_seqs + 1);
  for (int i = 0; i <= s.num_seqs; ++i) cu[i] = static_cast<int32_t>(tokens / s.num_seqs * i);
  int32_t* cu_dev = device_copy(cu, "cu");
  __nv_bfloat16* out = device_alloc<__nv_bfloat16>(elems, "out");

  kda::ForwardParams fp;
  fp.q = in.q;
  fp.k = in.k;
  fp.v = in.v;
  fp.gate = in.gate;
  fp.beta = in.beta;
  fp.out = out;
  fp.batch = 1;
  fp.tokens = tokens;
  fp.heads = s.heads;
  fp.cu_seqlens = cu_dev;
  fp.cu_seqlens_host = cu.data();
  fp.num_seqs = s.num_seqs;
  fp.fuse_q_l2norm = true;
  fp.workspace_bytes = kda::forward_workspace_bytes(fp);
  fp.workspace = device_alloc<char>(fp.workspace_bytes, "workspace");

  f16::Args a{};
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.gate = in.gate;
  a.beta = in.beta;
  a.q_stride = a.k_stride = a.v_stride = static_cast<int64_t>(s.heads) * dim;
  a.heads = s.heads;
  a.cu = cu_dev;
  a.num_seqs = s.num_seqs;
  a.capacity = f16::slot_capacity(tokens, s.num_seqs);
  a.records = device_alloc<char>(static_cast<size_t>(a.capacity) * s.heads * f16::kRecordBytes,
                                 "records");
  a.fuse_q_l2norm = true;

  f16::ChainArgs ca{};
  ca.records = a.records;
  ca.capacity = a.capacity;
  ca.heads = s.heads;
  ca.cu = cu_dev;
  ca.num_seqs = s.num_seqs;
  ca.out = out;
  ca.out_stride = static_cast<int64_t>(s.heads) * dim;

  f16::FusedArgs fa{};
  fa.in = a;
  fa.out = out;
  fa.out_stride = ca.out_stride;

  // One round: the library's forward, its PREP, factors16 on chip, factors16 with records, the
  // chain on those records, factors16 + chain, the one-kernel forward; medians over the rounds.
  // kFused + b - 1: fused16 with b builders.
  enum { kLibForward, kLibPrep, kOnChip, kRecords, kChain, kBoth, kFused, kKinds = kFused + 3 };
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> t[kKinds];
  for (int it = 0; it < warmup + runs; ++it) {
    for (int which = 0; which < kKinds; ++which) {
      check(cudaEventRecord(e0, stream), "cudaEventRecord");
      try {
        if (which == kLibForward) kda::chunk_forward(fp, stream);
        if (which == kLibPrep) kda::chunk_forward_stage(fp, 0, stream);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "kda-lab-factors16: library forward: %s\n", ex.what());
        std::exit(3);
      }
      if (which == kOnChip || which == kRecords || which == kBoth) {
        a.on_chip = which == kOnChip;
        check(f16::launch(a, stream), "factors16 launch");
      }
      if (which == kChain || which == kBoth) check(f16::launch_chain(ca, stream), "chain launch");
      if (which >= kFused) check(f16::launch_fused(fa, which - kFused + 1, stream), "fused16 launch");
      check(cudaEventRecord(e1, stream), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "timed kernel");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      if (it >= warmup) t[which].push_back(ms);
    }
  }
  const double chunk_heads = static_cast<double>(tokens) / 64 * s.heads;
  double m[kKinds];
  for (int i = 0; i < kKinds; ++i) m[i] = median(t[i]);
  // A step of the one-kernel forward: its time over the sub-chunks each CTA walks in turn (one
  // CTA per SM: ceil(chains / 132) rounds of 8192 / num_seqs / 16 steps).
  const double chains = static_cast<double>(s.num_seqs) * s.heads;
  const double steps = std::ceil(chains / 132) * (static_cast<double>(tokens) / s.num_seqs / 16);
  std::printf("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |",
              s.name, long_memory ? "mixed" : "contract", m[kLibForward], m[kLibPrep], m[kOnChip],
              m[kRecords], m[kChain], m[kBoth], m[kBoth] / m[kLibForward],
              m[kOnChip] * 1e3 * 132 / chunk_heads, m[kLibPrep] * 1e3 * 132 / chunk_heads);
  for (int b = 0; b < 3; ++b) {
    std::printf(" %.3f | %.2f | %.3f |", m[kFused + b], m[kFused + b] * 1e3 / steps,
                m[kFused + b] / m[kLibForward]);
  }
  std::printf("\n");
  check(cudaEventDestroy(e0), "cudaEventDestroy");
  check(cudaEventDestroy(e1), "cudaEventDestroy");
  for (void* ptr : {static_cast<void*>(in.q), static_cast<void*>(in.k), static_cast<void*>(in.v),
                    static_cast<void*>(in.gate), static_cast<void*>(in.beta),
                    static_cast<void*>(cu_dev), static_cast<void*>(out), fp.workspace,
                    static_cast<void*>(a.records)}) {
    check(cudaFree(ptr), "cudaFree");
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  int warmup = 5, runs = 30, device = 0;
  bool check_only = false, time_only = false;
  std::string only;
  uint64_t seed = 20261203;
  CLI::App app{"kda-lab-factors16: the 16-token factor builder of the one-kernel forward, "
               "checked against float64 and timed against the library's PREP (lab/README.md)"};
  app.add_flag("--check-only", check_only, "run the checks only");
  app.add_flag("--time-only", time_only, "run the timing only");
  app.add_option("--warmup", warmup, "untimed rounds")->check(CLI::Range(0, 100));
  app.add_option("--runs", runs, "timed rounds (medians)")->check(CLI::Range(1, 1000));
  app.add_option("--seed", seed, "input seed");
  app.add_option("--only", only, "time one shape (h96-fixed, h96-uniform8, h64-fixed, h64-uniform8)")
      ->check(CLI::IsMember({"h96-fixed", "h96-uniform8", "h64-fixed", "h64-uniform8"}));
  bool contract_only = false;
  app.add_flag("--contract-only", contract_only, "time the contract gates only (not long memory)");
  app.add_option("--device", device, "CUDA device index")->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (check_only && time_only) {
    std::fprintf(stderr, "kda-lab-factors16: --check-only and --time-only exclude each other\n");
    return 2;
  }
  check(cudaSetDevice(device), "cudaSetDevice");
  bool ok = true;
  if (!time_only) {
    const CheckCase cases[] = {
        {"contract gates, a huge and a zero q row", 0.0, 1.0, -5.0, true},
        {"long-memory gates", -12.0, 1.0, -5.0, false},
        {"steepest contract decay (lower bound -5.915, dt_bias 8..9)", 8.0, 9.0,
         kda::ref::kMinGateLowerBound, false},
    };
    for (const auto& c : cases) ok = run_check(c, seed) && ok;
  }
  if (!check_only) {
    std::printf(
        "| shape | gates | library forward (ms) | library PREP | factors16 on chip | factors16 "
        "with records | chain | factors16 + chain | (factors16 + chain) / library | on chip: "
        "SM-us per 64 tokens | PREP: SM-us per 64 tokens | fused16, 1 builder | us per step | "
        "/ library | fused16, 2 builders | us per step | / library | fused16, 1-warpgroup chain, "
        "3 builders | us per step | / library |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|\n");
    const TimeShape shapes[] = {{"h96-fixed", 96, 1}, {"h96-uniform8", 96, 8},
                                {"h64-fixed", 64, 1}, {"h64-uniform8", 64, 8}};
    for (const bool long_memory : {false, true}) {
      if (long_memory && contract_only) break;
      for (const auto& s : shapes) {
        if (only.empty() || only == s.name) run_time(s, long_memory, warmup, runs, seed);
      }
    }
  }
  if (!ok) std::fprintf(stderr, "kda-lab-factors16: a factor is outside its budget\n");
  return ok ? 0 : 1;
}
