// Machine ceilings the kernel benchmarks are compared with: read bandwidth (1 and 2 threads), f32
// FMA peak and int8 VNNI peak. Run: build/bench/pagoda_kernel_bench --benchmark_filter=Machine
#include <benchmark/benchmark.h>

#include "backend/cpu/machine_probe.h"

namespace {

void BM_MachineReadBandwidth(benchmark::State& state) {
  pagoda::ThreadPool pool(static_cast<int>(state.range(0)));
  double gbs = 0;
  for (auto _ : state) gbs = pagoda::cpu::measure_read_bandwidth(pool, size_t{512} << 20, 3);
  state.counters["GB/s"] = gbs;
}
BENCHMARK(BM_MachineReadBandwidth)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MachineFmaPeak(benchmark::State& state) {
  pagoda::ThreadPool pool(static_cast<int>(state.range(0)));
  double g = 0;
  for (auto _ : state) g = pagoda::cpu::measure_fma_peak(pool);
  state.counters["GFLOP/s"] = g;
}
BENCHMARK(BM_MachineFmaPeak)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MachineVnniPeak(benchmark::State& state) {
  pagoda::ThreadPool pool(static_cast<int>(state.range(0)));
  double g = 0;
  for (auto _ : state) g = pagoda::cpu::measure_vnni_peak(pool);
  state.counters["GOP/s"] = g;
}
BENCHMARK(BM_MachineVnniPeak)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
