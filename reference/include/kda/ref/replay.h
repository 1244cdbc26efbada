// kda::ref replay: the chunked forward in float64 with a GPU kernel's roundings put back, one
// rounding point at a time, so that a kernel's error against the golden can be taken apart stage
// by stage (docs/precision.md, apps/kda-error-budget).
//
// The replay follows the kernels' algorithm exactly (docs/design.md "v2", "v2w" and "The one-pass
// forward"): 64-token chunks (the two kernels) or 16-token sub-chunks of the same 64-token-local
// gate (the one pass), grams with per-column-block anchors, T = (I + A_kk)^-1 (off-diagonal blocks through the
// Schur products), W and U as tensor-core products of rounded operands, the record's parts rounded
// once, and the scan's state and V_new rounded where they become MMA operands. Everything that is
// not a rounding point is exact (float64, where the kernel accumulates in fp32: fp32 accumulation
// of <= 128 terms costs ~1e-7 relative, far below every rounding point). With every point exact
// the replay is the chunked algorithm and agrees with recurrent_forward<double> to ~1e-15.
#pragma once

#include <string>
#include <vector>

#include "kda/ref/reference.h"

namespace kda::ref {

// The number format a value is rounded to at one point (round to nearest, ties to even; the
// formats' own exponent ranges, subnormals included; overflow gives inf).
enum class Format {
  exact,   // no rounding (float64)
  f32,
  tf32,    // fp32 range, 11 significant bits
  f16,     // 11 significant bits, max 65504, subnormals below 2^-14
  bf16,    // 8 significant bits, fp32 range
  bf16x2,  // a hi + lo pair of bf16 (two MMAs): hi = bf16(x), lo = bf16(x - hi)
  f16x2,   // a hi + lo pair of fp16
  f16s,    // fp16 under a power-of-two scale per row or column that keeps it in range: 11
           // significant bits, no range limit (the v2w scan's state and V_new, the record's U)
};
const char* to_string(Format format);
// Throws std::invalid_argument for an unknown name.
Format parse_format(const std::string& name);
double round_to(Format format, double x);

// Every rounding point of the kernels' pipeline, in pipeline order. The defaults are what the
// default kernel (PREP v2 writing the v2w record + SCAN v2w) does there.
struct RoundingPlan {
  // The kernel's chunk: 64 (PREP and SCAN) or 16 (the one pass's sub-chunks: the gate stays
  // 64-token-local, each sub-chunk's factors take it relative to the row before the sub-chunk).
  int chunk = 64;
  bool fused_q_norm = true;  // fused: raw q in the grams and q', scale r_i folded in; explicit: q_hat
  // U = (T diag beta) v (t_for_u rounds T diag beta, u_rhs rounds v: exact for bf16 inputs), as
  // the kernels since the v2w record do; false: U = T (beta v) (u_rhs rounds beta v).
  bool beta_in_t = true;
  Format q_hat = Format::bf16;      // explicit path: l2norm(q) output (bf16); unused when fused
  Format gram_row = Format::bf16;   // gram row operand x_i 2^(G_i - G_m)
  Format gram_col = Format::bf16;   // gram column operand k_j 2^(G_m - G_j)
  Format a_qk = Format::f16;        // A_qk in the record
  Format a_kk_off = Format::f16;    // A_kk's off-diagonal blocks in the Schur products
  Format t_for_w = Format::f16;     // T as the operand of W = T (beta k Gamma)
  Format w_rhs = Format::f16;       // beta k Gamma
  Format t_for_u = Format::bf16;    // T diag beta (or T) as the operand of U
  Format u_rhs = Format::exact;     // v (or beta v)
  Format w = Format::f16;           // W in the record
  Format u = Format::f16s;          // U in the record (fp16, scaled per value column)
  Format q_prime = Format::f16;     // q' = scale r q Gamma in the record
  Format kg = Format::f16;          // kg = k 2^(G_last - G) in the record
  Format state_operand = Format::f16s;  // the state as the A operand of S^T W^T and S^T q'^T
  Format v_new = Format::f16s;          // V_new as the A operand of A_qk V_new and kg^T V_new
  Format out = Format::bf16;            // the output store

  // The plan of the default kernel for one path.
  static RoundingPlan default_kernel(bool fused);
  // The v1 record's plan (bf16 record, bf16 scan operands, U = T (beta v)): v2_mma and v2t_mma,
  // and v2w_mma before the v2w record.
  static RoundingPlan bf16_record(bool fused);
  // The one pass (lib/kda/src/onepass, lab one_pass16): 16-token sub-chunks, bf16 grams, T in
  // fp32 (one 16 x 16 block), W = T (beta k Gamma) on fp16 operands, U = beta v + (T - I) diag(beta)
  // v on bf16 operands kept in fp32, every record tile (W, q', kg, A_qk) and both scan operands
  // (the state, V_new) in bf16.
  static RoundingPlan one_pass(bool fused);
  // Every point exact (fused_q_norm kept).
  RoundingPlan exact() const;

  // The points by name, for tools and tests: {"q_hat", &RoundingPlan::q_hat}, ...
  struct Point {
    const char* name;
    Format RoundingPlan::*member;
    const char* what;
  };
  static const std::vector<Point>& points();
  // Sets one point by name; throws std::invalid_argument naming the known points.
  void set(const std::string& point, Format format);
  // "gram_row=bf16 ..." for every point that differs from `base`.
  std::string diff(const RoundingPlan& base) const;
};

// The forward with the plan's roundings (output and final state as recurrent_forward<double>
// gives them). Options::normalize_q must be true (both paths normalize q; the plan says how);
// Options::chunk_size must be 64 (the gate's chunk) and RoundingPlan::chunk 64 or 16.
Result<double> replay_forward(const Problem& problem, const Options& options,
                              const RoundingPlan& plan);

}  // namespace kda::ref
