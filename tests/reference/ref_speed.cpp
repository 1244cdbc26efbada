// kda-ref-speed: times the CPU references on the shapes of a shape file, the way kda-check runs
// them, and optionally saves or compares their outputs (docs/perf-notes.md, "CPU reference
// speed"). Uses only the reference's and the harness's public API of 0b498d2 onwards, so the
// same source builds against an older kda_ref for before/after runs on one machine.
//
//   kda-ref-speed SHAPES [ID...] [--golden | --reference] [--save DIR | --compare DIR]
//
// --golden (default) times kda-check's GPU-backend golden (kda::harness::compute_golden: recurrence in fp64
// and fp32, l2norm of q in both); --reference times the `--backend reference` job (recurrence
// and chunked, both precisions). --save DIR writes the fp64 and fp32 recurrence outputs of each
// shape as raw arrays (DIR/<id>.{f64,f32}); --compare DIR reads them back and prints how far this
// build's outputs are from the saved ones and how max|low - golden| (the budget's ref_err) moved.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"
#include "kda/ref/reference.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class T>
void write_raw(const std::string& path, const std::vector<T>& values) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!file) throw std::runtime_error("cannot write " + path);
}

template <class T>
std::vector<T> read_raw(const std::string& path, std::size_t count) {
  std::vector<T> values(count);
  std::ifstream file(path, std::ios::binary);
  file.read(reinterpret_cast<char*>(values.data()),
            static_cast<std::streamsize>(count * sizeof(T)));
  if (!file) throw std::runtime_error("cannot read " + path);
  return values;
}

template <class A, class B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
  return diff;
}

template <class A>
double max_abs(const std::vector<A>& a) {
  double m = 0;
  for (A x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  bool reference = false;
  std::string save_dir, compare_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reference") {
      reference = true;
    } else if (arg == "--golden") {
      reference = false;
    } else if ((arg == "--save" || arg == "--compare") && i + 1 < argc) {
      (arg == "--save" ? save_dir : compare_dir) = argv[++i];
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: kda-ref-speed SHAPES [ID...] [--golden | --reference] "
                           "[--save DIR | --compare DIR]\n");
      return 2;
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty()) {
    std::fprintf(stderr, "kda-ref-speed: no shape file\n");
    return 2;
  }
  try {
    const auto file = kda::harness::load_shape_file(positional[0]);
    const std::vector<std::string> only(positional.begin() + 1, positional.end());
    std::printf("%s, %d threads, %s\n", reference ? "reference backend" : "golden",
                omp_get_max_threads(), positional[0].c_str());
    double total = 0;
    int64_t total_token_heads = 0;
    for (const auto& shape : file.shapes) {
      if (!only.empty() && std::find(only.begin(), only.end(), shape.id) == only.end()) continue;
      const auto inputs =
          kda::harness::make_inputs(shape, shape.seed.value_or(kda::harness::kDefaultSeed));
      const kda::ref::Problem problem = inputs.to_reference();
      kda::ref::Options options;
      options.final_state = inputs.want_final_state;
      const int64_t token_heads =
          (inputs.cu_seqlens.empty() ? inputs.batch * inputs.tokens : inputs.cu_seqlens.back()) *
          inputs.heads;

      const auto start = std::chrono::steady_clock::now();
      std::vector<double> parts;  // seconds of each step, in the order run
      const auto golden = kda::ref::recurrent_forward<double>(problem, options);
      parts.push_back(seconds_since(start));
      const auto low = kda::ref::recurrent_forward<float>(problem, options);
      parts.push_back(seconds_since(start));
      if (reference) {
        const auto chunked = kda::ref::chunked_forward<double>(problem, options);
        parts.push_back(seconds_since(start));
        const auto chunked_f32 = kda::ref::chunked_forward<float>(problem, options);
        parts.push_back(seconds_since(start));
        (void)chunked;
        (void)chunked_f32;
      } else {
        const int64_t rows = inputs.batch * inputs.tokens * inputs.heads;
        std::vector<double> q_hat(problem.q.size());
        kda::ref::l2norm_rows<double>(problem.q.data(), q_hat.data(), rows, inputs.key_dim);
        std::vector<float> q_hat_low(problem.q.size());
        kda::ref::l2norm_rows<float>(problem.q.data(), q_hat_low.data(), rows, inputs.key_dim);
      }
      const double seconds = seconds_since(start);
      total += seconds;
      total_token_heads += token_heads;
      std::printf("%-14s %9lld token-heads %8.2f s (", shape.id.c_str(),
                  static_cast<long long>(token_heads), seconds);
      const char* names[] = {"recurrent f64", "recurrent f32", "chunked f64", "chunked f32"};
      for (std::size_t p = 0; p < parts.size(); ++p)
        std::printf("%s%s %.2f", p ? ", " : "", names[p], parts[p] - (p ? parts[p - 1] : 0.0));
      std::printf(")\n");
      std::fflush(stdout);

      if (!save_dir.empty()) {
        write_raw(save_dir + "/" + shape.id + ".f64", golden.out);
        write_raw(save_dir + "/" + shape.id + ".f32", low.out);
      }
      if (!compare_dir.empty()) {
        const auto old_golden = read_raw<double>(compare_dir + "/" + shape.id + ".f64", golden.out.size());
        const auto old_low = read_raw<float>(compare_dir + "/" + shape.id + ".f32", low.out.size());
        const double scale = max_abs(old_golden);
        const double err_old = max_abs_diff(old_low, old_golden);
        const double err_new = max_abs_diff(low.out, golden.out);
        std::printf("  fp64: max|new - old| / max|old| = %.3g\n",
                    max_abs_diff(golden.out, old_golden) / scale);
        std::printf("  fp32: max|new - old| / max|golden| = %.3g; ref_err max|low - golden| "
                    "%.6g (old) -> %.6g (new), %+.2f %%\n",
                    max_abs_diff(low.out, old_low) / scale, err_old, err_new,
                    100.0 * (err_new - err_old) / err_old);
      }
    }
    std::printf("total %lld token-heads %.2f s (%.3g token-heads/s)\n",
                static_cast<long long>(total_token_heads), total, double(total_token_heads) / total);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kda-ref-speed: %s\n", e.what());
    return 2;
  }
  return 0;
}
