// kda-check's result model (check_results.h), the typed cells and the JSON printer (cells.h), and
// the CPU verification's verdicts (verify.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kda/harness/cells.h"
#include "kda/harness/check_results.h"
#include "kda/harness/verdict.h"
#include "kda/harness/verify.h"

namespace kda::harness {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Judgement passing(double max_abs_err = 1.25e-3) {
  Judgement j;
  j.elements = 4096;
  j.max_abs_err = max_abs_err;
  j.worst_index = 17;
  j.ref_err = 2.5e-3;
  j.max_golden = 3.0;
  j.budget = 0.0515625;
  j.rel_rms = 1.0 / 3.0;  // not short in decimal: the JSON must keep every bit
  j.within_budget = j.within_rms = true;
  return j;
}

Judgement non_finite() {
  Judgement j = passing();
  j.non_finite = 3;
  j.max_abs_err = std::numeric_limits<double>::infinity();
  j.within_budget = false;
  return j;
}

std::vector<CheckRow> sample_rows() {
  CheckRow out = judgement_row("smoke-packed", "fused", "out", passing());
  out.gate = "contract";
  out.variant = "v2w_mma";
  out.carry = StateCarry{0.0321, false};
  out.repeat = Repeat::bitwise;
  out.reference_seconds = 0.125;
  CheckRow ht = judgement_row("smoke-packed", "fused", "final_state", non_finite());
  ht.gate = "contract";
  CheckRow skipped;
  skipped.shape = "k64";
  skipped.path = "gpu";
  skipped.tensor = "-";
  skipped.verdict = Verdict::not_verified;
  skipped.reason = "K = 64, V = 128; the GPU kernels support K = V = 128";
  return {out, ht, skipped};
}

TEST(Verdict, WordsRoundTrip) {
  for (Verdict v : {Verdict::passed, Verdict::failed, Verdict::not_verified}) {
    EXPECT_EQ(parse_verdict(to_string(v)), v);
  }
  EXPECT_STREQ(to_string(Verdict::not_verified), "not verified");
  EXPECT_FALSE(parse_verdict("Passed").has_value());
  EXPECT_FALSE(parse_verdict("failed: x").has_value());
}

TEST(CheckRow, VerdictComesFromTheEnumNotTheText) {
  const CheckRow ok = judgement_row("a", "fused", "out", passing());
  EXPECT_EQ(ok.verdict, Verdict::passed);
  EXPECT_EQ(ok.verdict_text(), "passed");
  const CheckRow bad = judgement_row("a", "fused", "out", non_finite());
  EXPECT_TRUE(bad.failed());
  EXPECT_EQ(bad.verdict_text(), "failed: 3 non-finite values");
  EXPECT_EQ(bad.verdict_text(), non_finite().verdict());
  // A reason that reads like a failure does not make one (the old rfind("failed") did).
  CheckRow odd;
  odd.verdict = Verdict::not_verified;
  odd.reason = "failed to find a GPU";
  EXPECT_FALSE(odd.failed());
  const CheckCounts n = count_verdicts({ok, bad, odd});
  EXPECT_EQ(n.rows, 3);
  EXPECT_EQ(n.passed, 1);
  EXPECT_EQ(n.failed, 1);
  EXPECT_EQ(n.not_verified, 1);
}

TEST(CheckColumns, HeadersArePinnedAndCellsTyped) {
  const std::vector<std::string> summary = {"shape",  "gate",    "path",  "variant",
                                            "tensor", "max_abs_err", "budget", "rel_rms",
                                            "carry",  "repeat",  "verdict"};
  const std::vector<std::string> full = {
      "shape",      "gate",     "path",    "variant",    "tensor",      "max_abs_err",
      "budget",     "rel_rms",  "carry",   "repeat",     "carry_weak",  "elements",
      "ref_err",    "max_golden", "worst_index", "non_finite", "inactive_nonzero",
      "reference_s", "verdict"};
  EXPECT_EQ(check_cells({}, false).columns, summary);
  EXPECT_EQ(check_cells({}, true).columns, full);

  const CellTable t = check_cells(sample_rows(), true);
  auto cell = [&](size_t row, const std::string& name) {
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (t.columns[c] == name) return t.rows[row][c];
    }
    ADD_FAILURE() << "no column " << name;
    return Cell();
  };
  EXPECT_EQ(std::get<double>(cell(0, "max_abs_err")), 1.25e-3);
  EXPECT_EQ(std::get<int64_t>(cell(0, "elements")), 4096);
  EXPECT_EQ(std::get<int64_t>(cell(0, "worst_index")), 17);
  EXPECT_EQ(std::get<double>(cell(0, "carry")), 0.0321);
  EXPECT_EQ(std::get<std::string>(cell(0, "carry_weak")), "no");
  EXPECT_EQ(std::get<std::string>(cell(0, "repeat")), "bitwise");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(cell(1, "variant")));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(cell(1, "carry")));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(cell(2, "max_abs_err")));  // no judgement
  EXPECT_TRUE(std::holds_alternative<std::monostate>(cell(2, "gate")));
  EXPECT_EQ(std::get<int64_t>(cell(2, "elements")), 0);
  // The markdown shows the carry as text with its weakness.
  const CellTable md = check_cells(sample_rows(), false);
  EXPECT_EQ(std::get<std::string>(md.rows[0][8]), "3.21e-02");
}

TEST(CheckColumns, TextCellsKeepTheReportFormats) {
  const Table t = check_table(sample_rows(), true);
  ASSERT_EQ(t.rows.size(), 3u);
  const std::vector<std::string> first = {
      "smoke-packed", "contract", "fused", "v2w_mma", "out", "1.250e-03", "5.156e-02",
      "3.333e-01", "3.210e-02", "bitwise", "no", "4096", "2.500e-03", "3.000e+00", "17", "0",
      "0", "0.125", "passed"};
  EXPECT_EQ(t.rows[0], first);
  EXPECT_EQ(t.rows[1][5], "inf");
  EXPECT_EQ(t.rows[1][3], "-");  // no variant
  EXPECT_EQ(t.rows[1].back(), "failed: 3 non-finite values");
  EXPECT_EQ(t.rows[2][5], "-");
  EXPECT_EQ(t.rows[2].back(), "not verified: K = 64, V = 128; the GPU kernels support K = V = 128");
  EXPECT_EQ(check_cell_text(Cell(kNaN), CellStyle::scientific), "nan");
  EXPECT_EQ(check_cell_text(Cell(-std::numeric_limits<double>::infinity()),
                            CellStyle::scientific),
            "-inf");
}

TEST(CheckJson, RowsRoundTripWithTheCsvHeaderAsKeys) {
  CheckContext ctx;
  ctx.backend = "reference";
  ctx.git_commit = "abc";
  ctx.seed = 7;
  ctx.rms_limit = 4e-3;
  ctx.argv = {"kda-check", "--backend", "reference"};
  const std::vector<CheckRow> rows = sample_rows();
  const nlohmann::json doc = nlohmann::json::parse(check_json(ctx, rows));
  EXPECT_EQ(doc["tool"], "kda-check");
  EXPECT_EQ(doc["rms_limit"].get<double>(), 4e-3);
  EXPECT_FALSE(doc.contains("device"));  // reference backend: no GPU
  EXPECT_FALSE(doc.contains("variants"));
  ASSERT_EQ(doc["rows"].size(), rows.size());
  const std::vector<std::string> header = check_cells({}, true).columns;
  for (const auto& row : doc["rows"]) {
    std::set<std::string> keys;
    for (const auto& [key, value] : row.items()) keys.insert(key);
    EXPECT_EQ(keys, std::set<std::string>(header.begin(), header.end()));
  }
  const auto& r0 = doc["rows"][0];
  EXPECT_EQ(r0["rel_rms"].get<double>(), 1.0 / 3.0);  // full precision, not "3.333e-01"
  EXPECT_EQ(r0["elements"].get<int64_t>(), 4096);
  EXPECT_EQ(r0["verdict"], "passed");
  EXPECT_TRUE(doc["rows"][1]["max_abs_err"].is_null());  // inf is not a JSON number
  EXPECT_TRUE(doc["rows"][1]["variant"].is_null());
  EXPECT_EQ(doc["rows"][2]["tensor"], "-");  // text columns stay text
  EXPECT_EQ(doc["summary"]["rows"], 3);
  EXPECT_EQ(doc["summary"]["failed"], 1);
  EXPECT_EQ(doc["summary"]["not_verified"], 1);

  DeviceInfo info;
  info.name = "NVIDIA H200";
  info.cc_major = 9;
  ctx.device = info;
  ctx.variants = {"v2w_mma"};
  const nlohmann::json gpu = nlohmann::json::parse(check_json(ctx, rows));
  EXPECT_EQ(gpu["device"]["cc"], "9.0");
  EXPECT_EQ(gpu["variants"][0], "v2w_mma");
}

TEST(CheckMarkdown, CountsComeFromTheVerdicts) {
  CheckContext ctx;
  ctx.backend = "reference";
  const std::string md = check_markdown(ctx, sample_rows(), 1.0);
  EXPECT_NE(md.find("3 rows: 1 passed, 1 failed, 1 not verified (1.0 s)"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| 3.21e-02 |"), std::string::npos);  // the carry as text
  EXPECT_EQ(md.find("carry_weak"), std::string::npos);   // a CSV/JSON column only
  // The raw path's golden is named only when the report has raw rows (not its API rows alone).
  EXPECT_EQ(md.find("raw path's golden"), std::string::npos);
  std::vector<CheckRow> rows = sample_rows();
  CheckRow api;
  api.shape = "(api)";
  api.path = "raw";
  api.tensor = "lower_bound -6 refused";
  api.verdict = Verdict::passed;
  rows.push_back(api);
  EXPECT_EQ(check_markdown(ctx, rows, 1.0).find("raw path's golden"), std::string::npos);
  CheckRow raw = judgement_row("smoke-packed", "raw", "out", passing());
  rows.push_back(raw);
  EXPECT_NE(check_markdown(ctx, rows, 1.0)
                .find("golden = CPU fp64 reference; the raw path's golden is that reference fed "
                      "the raw inputs (k = l2norm(k_raw), beta = sigmoid(beta_logits))\n"),
            std::string::npos);
}

TEST(Cells, JsonPrinterTypesAndRaggedRows) {
  EXPECT_TRUE(json_cell(Cell()).is_null());
  EXPECT_TRUE(json_cell(Cell(kNaN)).is_null());
  EXPECT_EQ(json_cell(Cell(int64_t{-3})).get<int64_t>(), -3);
  EXPECT_EQ(json_cell(Cell(std::string("x"))), "x");
  CellTable t;
  t.columns = {"a", "b"};
  t.rows = {{Cell(int64_t{1}), Cell(0.1)}};
  const nlohmann::json rows = json_rows(t);
  EXPECT_EQ(rows[0]["a"], 1);
  EXPECT_EQ(rows[0]["b"].get<double>(), 0.1);
  t.rows.push_back({Cell()});
  EXPECT_THROW(json_rows(t), std::invalid_argument);
}

TEST(PathCheck, FirstReasonWinsAndNamesTheTensor) {
  PathCheck check;
  check.out_judgement = passing();
  check.final_state_checked = true;
  check.final_state_judgement = passing();
  check.repeat_checked = true;
  EXPECT_TRUE(check.passed());
  EXPECT_EQ(check.verdict(), "passed");
  check.repeat_bitwise = false;
  EXPECT_EQ(check.verdict(), "failed: a repeated run gave different bits");
  check.inactive_nonzero = 2;
  EXPECT_EQ(check.verdict(), "failed: 2 non-zero values in rows at or after cu_seqlens[N]");
  check.final_state_judgement = non_finite();
  EXPECT_EQ(check.verdict(), "failed: final state 3 non-finite values");
  check.out_judgement = non_finite();
  EXPECT_EQ(check.verdict(), "failed: output 3 non-finite values");
  const std::vector<CheckRow> rows = path_rows("a", HostInputs{}, "v2w_mma", Golden{}, check);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].verdict_text(), "failed: output 3 non-finite values");
  EXPECT_EQ(rows[0].repeat, Repeat::differs);
  EXPECT_EQ(rows[1].tensor, "final_state");
  EXPECT_EQ(rows[1].verdict_text(), "failed: 3 non-finite values");
}

TEST(PathCheck, L2normRowsCarryNoVariantNorCarry) {
  PathCheck check;
  check.path = Path::l2norm;
  check.out_judgement = passing();
  const std::vector<CheckRow> rows = path_rows("a", HostInputs{}, "v2w_mma", Golden{}, check);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].path, "l2norm");
  EXPECT_EQ(rows[0].tensor, "q_hat");
  EXPECT_FALSE(rows[0].variant.has_value());
  EXPECT_FALSE(rows[0].carry.has_value());
  EXPECT_EQ(rows[0].repeat, Repeat::none);  // not repeated
}

TEST(Soak, VerdictText) {
  SoakResult soak;
  EXPECT_EQ(soak.verdict(), "failed: the soak did not run");
  soak.runs = 12;
  soak.seconds = 2.04;
  EXPECT_EQ(soak.verdict(), "passed: 12 runs in 2.0 s, all bitwise equal to the checked run");
  soak.differing = 2;
  soak.first_differing_run = 5;
  EXPECT_EQ(soak.verdict(),
            "failed: 2 of 12 runs in 2.0 s differed from the checked run (first: run 5)");
  const CheckRow row = soak_row("a", Path::explicit_, "v2w_mma", soak);
  EXPECT_TRUE(row.failed());
  EXPECT_EQ(row.repeat, Repeat::differs);
  EXPECT_EQ(row.variant, "v2w_mma");
}

TEST(FusedVsExplicit, RepeatSaysWhetherTheBitsAreEqual) {
  Golden golden;
  golden.out = {1.0, -2.0, 0.5};
  PathCheck fused, expl;
  fused.out = {1.0f, -2.0f, 0.5f};
  expl.out = fused.out;
  HostInputs inputs;
  const CheckRow same = fused_vs_explicit_row("a", inputs, "v2w_mma", golden, fused, expl, {});
  EXPECT_EQ(same.verdict, Verdict::passed);
  EXPECT_EQ(same.repeat, Repeat::equals_explicit);
  EXPECT_EQ(same.tensor, "out vs explicit (c)");
  fused.out[1] = -2.5f;  // off by far more than the budget the explicit error allows
  const CheckRow worse = fused_vs_explicit_row("a", inputs, "v2w_mma", golden, fused, expl, {});
  EXPECT_EQ(worse.verdict, Verdict::failed);
  EXPECT_EQ(worse.repeat, Repeat::differs_from_explicit);
  EXPECT_EQ(worse.reason.rfind("max |fused - golden| 5.000e-01 > 2 (max |explicit", 0), 0u)
      << worse.reason;
}

}  // namespace
}  // namespace kda::harness
