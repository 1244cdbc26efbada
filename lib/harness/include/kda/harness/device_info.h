// What the tools report about the GPU they ran on: plain data, filled by the apps' select_device
// (CUDA) and printed by the report writers (pure CPU).
#pragma once

#include <cstdint>
#include <string>

namespace kda::harness {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  int64_t l2_bytes = 0, global_mem_bytes = 0;
  int default_sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_width_bits = 0;
  double peak_mem_bw_Bps = 0.0;
  int driver_version = 0, runtime_version = 0;
  bool ecc = false;
};

}  // namespace kda::harness
