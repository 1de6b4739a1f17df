#!/usr/bin/env bash
# Run fmstack's GPU paths on a machine with one or more NVIDIA GPUs and write the results under $OUT.
#
#   OUT=/tmp/gpu-out [ARCHIVE=1] scripts/gpu_session.sh [part ...]
#       parts: env tests bench loop decode train exporter nvmlcalls planner sim
#       (default: env tests bench loop decode train exporter);
#       ARCHIVE=1 also packs $OUT into $OUT/results.tar.gz
#
# Expects python3 with torch (CUDA build), numpy, click, rich, PyYAML, prometheus-client, nvidia-ml-py; pydantic and
# plotly may come as wheels in .whl/ (installed into /tmp/site, nothing outside it is touched). Never changes the
# GPU's settings (clocks, power, persistence, MIG). Each part logs to $OUT/<part>.log; one failing part does not stop
# the others, and the exit code is the number of parts that failed.
set -u
OUT=${OUT:?set OUT to a directory for the results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute before the cd below
cd "$(dirname "$0")/.."
case "$OUT" in
    / | "$HOME" | "$PWD" | "$PWD"/src* | "$PWD"/tests*) echo "OUT=$OUT: choose an empty results directory" >&2; exit 2 ;;
esac
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(env tests bench loop decode train exporter)
failed=0

part_env() {
    nvidia-smi
    nvidia-smi -q | sed -n '/Clocks$/,/Max Clocks/p;/Power Readings/,/Max Power Limit/p'
    python3 -c "import torch, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda, \
torch.cuda.get_device_name(0), torch.cuda.device_count(), 'GPUs')"
    nproc; uptime
}

part_tests() {
    python3 -m pytest -q -p no:cacheprovider tests/bench/test_device.py tests/observability/test_nvml.py -rs
}

part_bench() {
    mkdir -p /tmp/fmstack-bench-storage
    python3 - <<'PYEOF'
# host-dispatched vs CUDA-graph (kernel) timing of the same GEMMs: what kernel_time_per_call_s removes
import torch
from fmstack.bench.device import kernel_time_per_call_s, time_per_call_s
for n in (256, 512, 1024, 2048, 4096):
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    call = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    host = time_per_call_s(call, "cuda", min_time_s=0.1)
    kern = kernel_time_per_call_s(call, "cuda", min_time_s=0.1)
    f = 2 * n**3
    print(f"bf16 {n}^3: host-timed {host * 1e6:8.2f} us {f / host / 1e12:6.1f} TFLOP/s | graph {kern * 1e6:8.2f} us {f / kern / 1e12:6.1f} TFLOP/s")
PYEOF
    python3 -m fmstack bench gemm --device cuda --model llama3.1-8b --tokens 8192 --out "$OUT/profile-cuda.json" \
        --json >"$OUT/bench-gemm.json" && python3 -m fmstack bench memory --device cuda --out "$OUT/profile-cuda.json" \
        --json >"$OUT/bench-memory.json" && python3 -m fmstack bench storage --device cuda --path /tmp/fmstack-bench-storage \
        --out "$OUT/profile-cuda.json" --json >"$OUT/bench-storage.json" \
        && python3 -m fmstack estimate train --model llama3.1-8b --instance p5.48xlarge --nodes 1 \
            --global-batch 64 --seq-len 8192 --calibration "$OUT/profile-cuda.json" --json >"$OUT/estimate-calibrated.json" \
        && python3 -m fmstack estimate train --model llama3.1-8b --instance p5.48xlarge --nodes 1 \
            --global-batch 64 --seq-len 8192 --json >"$OUT/estimate-catalog.json"
    local rc=$?
    python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
g = json.load(open(f"{out}/bench-gemm.json"))
for r in g["gemm"]:
    print(f'{r["dtype"]:5} {r["shape"]["m"]:6} {r["shape"]["n"]:6} {r["shape"]["k"]:6} {r["tflops"]:8.1f} TFLOP/s {r.get("pct_of_peak") or 0:5.1f} %')
m = json.load(open(f"{out}/bench-memory.json"))
for r in m["memory"]:
    print(f'{r["kernel"]:6} {r["buffer_bytes"]:>12} B {r["bw_gbps"]:8.0f} GB/s {r.get("pct_of_peak") or 0:5.1f} %')
EOF
    return $rc
}

part_loop() {
    python3 benchmarks/bench_closing_loop_cuda.py --preset medium --batch 8 --json "$OUT/loop-medium.json" \
        && python3 benchmarks/bench_closing_loop_cuda.py --preset medium --d-model 2048 --heads 16 --batch 8 \
            --json "$OUT/loop-d2048.json" \
        && python3 benchmarks/bench_closing_loop_cuda.py --preset small --batch 8 --json "$OUT/loop-small.json"
}

part_decode() {
    # the serving model's decode and prefill steps against the reference decoder (Llama 3.1 8B shape, bf16)
    python3 benchmarks/bench_decode_loop_cuda.py --json "$OUT/decode-loop.json"
}

part_train() {
    # the reference workload as a user runs it: torchrun, NCCL, bf16 autocast, checkpoints on local disk
    local n
    n=$(python3 -c "import torch; print(torch.cuda.device_count())")
    torchrun --standalone --nproc_per_node "$n" -m fmstack.workloads.train --model medium --precision bf16 \
        --steps 40 --batch-size 16 --ckpt-dir /tmp/fmstack-ckpt --ckpt-interval 20 --metrics-file "$OUT/train-medium-bf16.jsonl" \
        && torchrun --standalone --nproc_per_node "$n" -m fmstack.workloads.train --model medium --precision fp32 \
            --steps 20 --batch-size 16 --metrics-file "$OUT/train-medium-fp32.jsonl"
}

part_exporter() {
    python3 -m fmstack exporter --once --expected-gpus "$(nvidia-smi -L | wc -l)" --hostname gpu-host >"$OUT/scrape-nvml.txt" || return 1
    python3 - <<'EOF' || return 1
import statistics, time
from fmstack.observability.exporter import Exporter
from fmstack.observability.gpu_source import GpuSource
from fmstack.observability.gpu import NvmlBackend
b = NvmlBackend()
n = b.device_count()
ex = Exporter([GpuSource(b, "gpu-host", expected_gpus=n)])
ex.render()
wall, cpu = [], []
for _ in range(300):
    w, c = time.perf_counter(), time.process_time()
    ex.render()
    wall.append(time.perf_counter() - w); cpu.append(time.process_time() - c)
wall.sort()
print(f"real NVML, {n} GPU(s): scrape p50 {statistics.median(wall)*1e3:.3f} ms, p99 {wall[int(0.99*len(wall))-1]*1e3:.3f} ms, "
      f"max {wall[-1]*1e3:.3f} ms, CPU mean {statistics.fmean(cpu)*1e3:.3f} ms over {len(wall)} scrapes")
b.close()
EOF
    python3 -m cProfile -s tottime -m fmstack exporter --once --expected-gpus 1 --hostname gpu-host 2>&1 \
        | grep -A25 "Ordered by" >"$OUT/nvml-profile.txt"
    head -30 "$OUT/nvml-profile.txt"
    python3 benchmarks/bench_exporter.py --out "$OUT/exporter-bench.md"
}

part_nvmlcalls() {
    # wall time of each NVML query the exporter makes, per call (a VM's GPU passthrough makes ioctls dear)
    python3 - <<'PYEOF'
import statistics, time
import pynvml as nv
nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
calls = {
    "GetHandleByIndex": lambda: nv.nvmlDeviceGetHandleByIndex(0), "GetUUID": lambda: nv.nvmlDeviceGetUUID(h),
    "GetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h), "GetMemoryInfo": lambda: nv.nvmlDeviceGetMemoryInfo(h),
    "GetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h), "GetRemappedRows": lambda: nv.nvmlDeviceGetRemappedRows(h),
    "GetViolationStatus": lambda: nv.nvmlDeviceGetViolationStatus(h, nv.NVML_PERF_POLICY_POWER),
    "GetClockInfo": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
    "GetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
    "GetTemperature": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
    "GetPcieReplayCounter": lambda: nv.nvmlDeviceGetPcieReplayCounter(h),
    "GetTotalEccErrors": lambda: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
    "GetCurrentClocksEventReasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
    "GetNvLinkState(0)": lambda: nv.nvmlDeviceGetNvLinkState(h, 0),
}
for name, fn in calls.items():
    ts = []
    for _ in range(50):
        t = time.perf_counter()
        try:
            fn()
        except nv.NVMLError as exc:
            ts.append(float("nan")); err = str(exc); continue
        ts.append(time.perf_counter() - t)
    ok = [x for x in ts if x == x]
    print(f"{name:30} " + (f"median {statistics.median(ok) * 1e6:8.1f} us  max {max(ok) * 1e6:8.1f} us" if ok else f"error: {err}"))
PYEOF
}

part_planner() {
    python3 benchmarks/bench_planner.py
}

part_sim() {
    for policy in fifo slurm-backfill kueue; do
        timeout "${SIM_TIMEOUT_S:-200}" python3 benchmarks/bench_sim.py --policy "$policy" || echo "sim $policy: exit $?"
    done
    timeout "${SIM_TIMEOUT_S:-200}" python3 benchmarks/bench_sim.py --policy slurm-backfill --priority multifactor \
        || echo "sim slurm-backfill multifactor: exit $?"
}

for part in "${parts[@]}"; do
    echo "=== $part $(date -u +%H:%M:%S)"
    start=$SECONDS
    if "part_$part" >"$OUT/$part.log" 2>&1; then status=ok; else status="FAILED"; failed=$((failed + 1)); fi
    echo "=== $part: $status in $((SECONDS - start)) s"
    tail -n 25 "$OUT/$part.log"
done
if [ -n "${ARCHIVE:-}" ]; then  # one archive of everything, for transports that return few files
    tar -C "$OUT" -czf "$OUT/results.tar.gz" --exclude=results.tar.gz .
fi
exit $failed
