"""The corpus of bad command lines: each must exit 2 with one line naming the field, no traceback.

Every feature adds its own rows here: (argv, a substring the one-line message must contain).
Files named ``@bad:NAME`` are written by the test from ``BAD_FILES`` into a temporary directory first.
"""

from __future__ import annotations

BAD_FILES: dict[str, str] = {
    "bad_trace.csv": "job_id,submit_s,num_gpus,duration_s\n1,0,8,600\n2,10,eight,600\n",
    "huge_trace.csv": "job_id,submit_s,num_gpus,duration_s\n1,0,4096,600\n",
    "bad_elastic.csv": "name,time,application,num_replicas,batch_size\na,0,cifar10,2,256\nb,1,mnist,1,64\n",
    "elastic_bsz.csv": "name,time,application,num_replicas,batch_size\na,0,cifar10,1,100000000\n",
    "elastic_nan.csv": "name,time,application,num_replicas,batch_size\na,nan,cifar10,1,128\n",
    "not_profile.json": '{"hello": 1}',
    "not_yaml.yaml": "kind: gpu\nentries: [ {name: X, \n",
    "unknown_field.yaml": "kind: gpu\nentries:\n  - name: X1\n    architecture: x\n    bf16_dense_tflops: 1\n"
    "    fp16_dense_tflops: 1\n    hbm_gb: 1\n    hbm_type: x\n    hbm_bw_tbps: 1\n    tdp_w: 1\n    colour: red\n",
    "negative.yaml": "kind: gpu\nentries:\n  - name: X2\n    architecture: x\n    bf16_dense_tflops: -5\n"
    "    fp16_dense_tflops: 1\n    hbm_gb: 1\n    hbm_type: x\n    hbm_bw_tbps: 1\n    tdp_w: 1\n",
    "missing.yaml": "kind: instance\nentries:\n  - name: i1\n    gpu: H100\n",
    "bad_ref.yaml": "kind: instance\nentries:\n  - name: i2\n    gpu: H100\n    num_gpus: 8\n    gpu_memory_gb: 640\n"
    "    vcpus: 1\n    host_memory_gib: 1\n    nvlink_domain_gpus: 8\n    network: efa-v9\n    network_bw_gbps: 1\n",
    "both_bw.yaml": "kind: instance\nentries:\n  - name: i3\n    gpu: H100\n    num_gpus: 8\n    gpu_memory_gb: 640\n"
    "    vcpus: 1\n    host_memory_gib: 1\n    nvlink_domain_gpus: 8\n    network: efa-v2\n    network_bw_gbps: 400\n"
    "    network_gbit_per_s: 3200\n",
    "model_heads.yaml": "kind: model\nname: m1\nfamily: x\nnum_layers: 2\nhidden_size: 100\nffn_hidden_size: 400\n"
    "num_heads: 3\nnum_kv_heads: 3\nvocab_size: 10\nmax_seq_len: 8\n",
    "job_unknown.yaml": "name: a\ncommand: ['true']\ncolour: red\n",
    "job_gpus.yaml": "name: a\ncommand: ['true']\ninstance: p5.48xlarge\ngpus_per_node: 16\n",
    "job_ckpt_file.yaml": "name: a\ncommand: ['true']\ncheckpoint: {location: /etc/hostname/ckpt}\n",
    "job_ckpt_s3.yaml": "name: a\ncommand: ['true']\ncheckpoint:\n  location: /tmp\n  durable: s3://b/run\n"
    "  storage_options: {key: k, secret: s, client_kwargs: {endpoint_url: 'http://127.0.0.1:9'},"
    " config_kwargs: {connect_timeout: 1, retries: {max_attempts: 1}}}\n",
    "job_no_image.yaml": "name: a\ncommand: ['true']\n",
    "job_name.yaml": "name: a$(id)\ncommand: ['true']\n",
}

# (argv, substring expected in the one-line error)
BAD_ARGV: list[tuple[list[str], str]] = [
    (["catalog", "show", "gpu", "H1000"], "known: A100-40GB"),
    (["catalog", "show", "gpus", "h1000"], "unknown gpu"),
    (["catalog", "list", "spaceships"], "allowed: gpu, instance"),
    (["catalog", "show", "instance", "p9.huge"], "unknown instance"),
    (["catalog", "list", "--catalog", "/nonexistent/dir"], "not a directory"),
    (["catalog", "list", "--catalog", "@dir:not_yaml.yaml"], "not valid YAML at line"),
    (["catalog", "list", "--catalog", "@dir:unknown_field.yaml"], "field 'colour': unknown field"),
    (["catalog", "list", "--catalog", "@dir:negative.yaml"], "field 'bf16_dense_tflops'"),
    (["catalog", "list", "--catalog", "@dir:missing.yaml"], "missing required field"),
    (["catalog", "list", "--catalog", "@dir:bad_ref.yaml"], "field 'network': unknown fabric 'efa-v9'"),
    (
        ["catalog", "list", "--catalog", "@dir:both_bw.yaml"],
        "field 'network_gbit_per_s': give network_bw_gbps (GB/s) or network_gbit_per_s (Gb/s)",
    ),
    (["catalog", "show"], "Missing argument"),
    (["no-such-command"], "No such command"),
]

BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "4", "--tp", "8",
      "--pp", "3", "--dp", "2"], "tp(8) * pp(3) * cp(1) * dp(2) = 48 != num_gpus(32)"),
    (["estimate", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "1", "--tp", "3"],
     "does not divide num_gpus(8)"),
    (["estimate", "train", "--model", "llama9-1t", "--instance", "p5.48xlarge"], "unknown model 'llama9-1t'"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.96xlarge"], "unknown instance"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "12"],
     "12 is not a multiple of 8 GPUs per node"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "0"], "nodes"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp3"],
     "'fp3' is not one of"),
    (["estimate", "train", "--model", "mixtral-8x7b", "--instance", "p5.48xlarge", "--nodes", "2", "--ep", "16",
      "--global-batch", "16"], "ep(16) does not divide num_experts(8)"),
    (["estimate", "train", "--model", "@file:model_heads.yaml", "--instance", "p5.48xlarge"], "num_heads"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--calibration", "/nonexistent.json"],
     "calibration"),
]  # fmt: skip

_EST_RC = ["estimate", "train", "--instance", "p5.48xlarge", "--model"]
BAD_ARGV += [
    ([*_EST_RC, "llama3.1-8b", "--recompute-modules", "layernorm,attn"], "'attn' unknown; allowed: core_attn"),
    ([*_EST_RC, "llama3.1-8b", "--recompute-modules", "moe_act"], "moe_act needs an MoE model"),
    ([*_EST_RC, "llama3.1-8b", "--recompute-modules", "mla_up_proj"], "mla_up_proj needs multi-head latent"),
    ([*_EST_RC, "qwen3-30b-a3b", "--ep", "8", "--recompute-modules", "shared_experts"], "has no shared experts"),
    ([*_EST_RC, "llama3.1-8b", "--recompute", "full", "--recompute-modules", "mlp"], "need recompute=selective"),
    ([*_EST_RC, "llama3.1-8b", "--recompute", "none", "--recompute-modules", "mlp"], "need recompute=selective"),
    ([*_EST_RC, "llama3.1-8b", "--recompute-layers", "-1"], "recompute_layers: must be between 0 and"),
    ([*_EST_RC, "llama3.1-8b", "--recompute-layers", "33"], "= 32; got 33"),
    ([*_EST_RC, "llama3.1-8b", "--recompute", "full", "--recompute-layers", "4"], "recompute=full already"),
]  # fmt: skip

BAD_FILES.update(
    {
        "obs_signals_unknown.json": '{"node": "n1", "xids": [79], "colour": "red"}',
        "obs_signals_not_json.json": '{"node": "n1", "xids": [79,',
        "obs_signals_bad_xids.json": '[{"node": "n1", "xids": "79"}]',
        "obs_nvml_bad.json": '{"gpus": [{"gpu_temperature": 50}]}',
        "fmstack-cluster.json": "{}",
    }
)

BAD_ARGV += [
    (["health"], "--signals: give --signals FILE.json or at least one --xid"),
    (["health", "--xid", "0"], "Invalid value for '--xid'"),
    (["health", "--xid", "79", "--node", "n1;reboot"], "not a valid node name"),
    (["health", "--xid", "79", "--format", "slurm"], "--format slurm needs a node name"),
    (["health", "--xid", "79", "--format", "xml"], "'xml' is not one of"),
    (["health", "--signals", "/nonexistent/signals.json"], "--signals: cannot read"),
    (["health", "--signals", "@file:obs_signals_unknown.json"], "signals[0].colour: unknown field; allowed: node"),
    (["health", "--signals", "@file:obs_signals_not_json.json"], "not valid JSON at line 1"),
    (["health", "--signals", "@file:obs_signals_bad_xids.json"], "expected a list of integer Xid codes"),
    (["exporter", "--bind", "localhost:9400", "--once", "--backend", "none"], "--bind: 'localhost:9400' is not an IP"),
    (["exporter", "--port", "70000"], "Invalid value for '--port'"),
    (["exporter", "--backend", "fake", "--fake-script", "@file:obs_nvml_bad.json", "--once"],
     "gpu 0: unknown NVML fields ['gpu_temperature']"),
    (["exporter", "--backend", "none", "--app-dir", "/nonexistent/app", "--once"], "--app-dir: /nonexistent/app is not"),
    (["exporter", "--dashboards", "@dir:fmstack-cluster.json"], "pass --force to overwrite"),
]  # fmt: skip

BAD_ARGV += [
    (["plan", "train", "--model", "llama3.1-405b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12"],
     "no configuration of llama3.1-405b fits"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12",
      "--objective", "speed"], "'speed' is not one of"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "0", "--tokens", "1e12"],
     "must be positive GPU counts"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "12", "--tokens", "1e12"],
     "12 is not a multiple of 8 GPUs per p5.48xlarge node"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "a lot", "--tokens", "1e12"],
     "is not a count"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "-5"],
     "tokens: must be > 0"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5e.48xlarge", "--gpus", "8", "--tokens", "1e12",
      "--objective", "cost"], "cost needs a price for p5e.48xlarge"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12",
      "--html", "/nonexistent-dir/plan.html"], "does not exist"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12", "--axis",
      "nvlink", "--values", "12"], "must be a positive multiple of 8 GPUs per node"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12", "--axis",
      "efa", "--values", "efa-v9"], "unknown fabric 'efa-v9'"),
    (["scale", "--model", "llama3.1-405b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12", "--axis",
      "efa"], "no value of --axis efa could be planned; efa-v1: skipped: no configuration of llama3.1-405b fits"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12", "--axis",
      "efa", "--values", "nvlink-4"], "nvlink-4 is a scale-up fabric; --axis efa takes scale-out fabrics"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12", "--axis",
      "nodes", "--values", "two"], "'two' is not a node count"),
    (["bench", "gemm", "--device", "tpu"], "device: unknown device 'tpu'; allowed: cpu, cuda"),
    (["bench", "gemm", "--dtype", "fp64"], "allowed: fp32, bf16, fp16"),
    (["bench", "gemm", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["bench", "gemm", "--threads", "0"], "threads: 0; allowed: >= 1"),
    (["bench", "memory", "--max-bytes", "100"], "max-bytes: 100 is too small"),
    (["bench", "memory", "--out", "/nonexistent-dir/p.json"], "out: directory /nonexistent-dir does not exist"),
    (["bench", "memory", "--out", "@file:not_profile.json"], "field 'device': missing required field"),
    (["bench", "collectives", "--op", "all_sum"], "allowed: all_reduce, all_gather"),
    (["bench", "collectives", "--ranks", "1"], "ranks: 1; a collective needs at least 2 processes"),
    (["bench", "storage"], "Missing option '--path'"),
    (["bench", "storage", "--path", "/nonexistent-dir"], "/nonexistent-dir is not an existing directory"),
    (["bench", "storage", "--path", "/sys"], "path: no write permission in /sys"),
    (["bench", "memory", "--procs", "0"], "procs: 0 on cpu; allowed: >= 1"),
    (["bench", "gemm", "--procs", "2", "--device", "cuda"], "> 1 only with --device cpu"),
    (["launch", "@file:job_unknown.yaml", "--on", "slurm"], "field 'colour': unknown field"),
    (["launch", "@file:job_gpus.yaml", "--on", "slurm"], "gpus_per_node: 16 > 8, the GPUs of one p5.48xlarge"),
    (["launch", "@file:job_ckpt_file.yaml", "--on", "slurm"], "checkpoint.location: '/etc/hostname/ckpt'"),
    (["launch", "@file:job_ckpt_s3.yaml", "--on", "slurm"], "checkpoint.durable: 's3://b/run' is unreachable"),
    (["launch", "@file:job_no_image.yaml", "--on", "kubernetes"], "image: a container image is required"),
    (["launch", "@file:job_name.yaml", "--on", "local"], "field 'name': Value error"),
    (["launch", "@file:job_unknown.yaml", "--on", "mars"], "Invalid value for '--on'"),
    (["status", "12345"], "ID: '12345' is not a job id"),
    (["cancel", "slurm:12;rm"], "a Slurm job id is digits"),
]  # fmt: skip

BAD_ARGV += [
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--input-len", "2048",
      "--output-len", "0"], "output-len: must be >= 1, got 0"),
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8",
      "--attention-precision", "fp4", "--input-len", "128", "--output-len", "128"],
     "attention-precision: H100 has no 'fp4' peak"),
    (["estimate", "serve", "--model", "mixtral-8x7b", "--instance", "p5.48xlarge", "--tp", "8", "--ep", "16",
      "--input-len", "128", "--output-len", "128"], "ep: ep(16) needs an MoE model, must divide tp(8)"),
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--attention-dp",
      "--input-len", "128", "--output-len", "128"], "attention-dp: attention data parallelism needs an MoE model"),
    (["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tp", "64", "--input-len", "128",
      "--output-len", "128"], "tp(64) must divide num_heads(32)"),
    (["estimate", "serve", "--model", "llama3.1-405b", "--instance", "p5.48xlarge", "--tp", "1", "--input-len", "128",
      "--output-len", "128"], "does not fit"),
    (["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "128",
      "--output-len", "128", "--prefix-hit-rate", "1.5"], "prefix-hit-rate"),
    (["plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len", "256",
      "--ttft-p99", "0.001", "--itl-p99", "0.05"], "slo: no deployment meets"),
    (["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
      "--ttft-p99", "0.5", "--itl-p99", "0.05", "--html", "/nonexistent/dir/serve.html"], "html"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--placement", "split"],
     "split placement needs >= 2 nodes"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "0"], "prompts: must be >= 1"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--train-tp", "0"],
     "train-tp: must be >= 1, got 0"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--train-pp", "0"],
     "train-pp: must be >= 1, got 0"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--rollout-tp", "0"],
     "rollout-tp: must be >= 1, got 0"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--rollout-tp", "-8"],
     "rollout-tp: must be >= 1, got -8"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--epochs", "0"],
     "epochs: must be >= 1, got 0"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--placement", "split",
      "--rollout-nodes", "0"], "rollout-nodes: must be >= 1, got 0"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "0"], "nodes: must be"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--async"],
     "async: needs --placement split"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--rollout-nodes", "1"],
     "rollout-nodes: needs --placement split"),
    (["estimate", "rl", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--rollout-tp", "2"],
     "rollout-tp: colocated, the rollout engine may take 50% of the 79.6 GiB per GPU (39.8 GiB"),
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--input-len", "2048",
      "--output-len", "256", "--concurrency", "64", "--max-batch", "0"], "max-batch: must be >= 1, got 0"),
    (["estimate", "train", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2", "--pp", "2",
      "--ep", "8", "--overlap-ep", "--global-batch", "64"], "overlap-ep: the expert all-to-all overlap with pp(2)"),
]  # fmt: skip

BAD_ARGV += [
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--input-len", "2048",
      "--output-len", "256", "--qps", "1000"], "qps: 1000 requests/s exceeds one replica's capacity"),
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--input-len", "2048",
      "--output-len", "256", "--qps", "2", "--concurrency", "8"], "not both"),
]  # fmt: skip

# checkpoints, failures and goodput (estimate train --tokens)
_EST8 = ["estimate", "train", "--model", "llama3.1-8b", "--tokens", "1e12"]
BAD_ARGV += [
    ([*_EST8, "--instance", "p5.48xlarge", "--mtbf-hours", "-5"], "mtbf: node_mtbf_h must be a positive"),
    ([*_EST8, "--instance", "grand-teton-h100", "--checkpoint-tier", "local-nvme"], "has no local NVMe"),
    ([*_EST8, "--instance", "p5.48xlarge", "--fsx-capacity-tib", "0"], "fsx_capacity_tib: must be a positive"),
    ([*_EST8, "--instance", "p5.48xlarge", "--checkpoint-tier", "fsx-platinum"], "unknown storage tier"),
    ([*_EST8, "--instance", "p5.48xlarge", "--spares", "-1"], "spares: must be a non-negative"),
    ([*_EST8, "--instance", "p5.48xlarge", "--recovery", "teleport"], "'teleport' is not one of"),
    # a resilience flag without --tokens would change nothing (session 11 review)
    (
        ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--mtbf-hours", "10"],
        "mtbf-hours: --mtbf-hours shapes the time to train with checkpoints and failures; add --tokens N",
    ),
    (["simulate", "--nodes", "4", "--days", "1", "--trace", "@file:bad_trace.csv"], "bad_trace.csv line 3"),
    (["simulate", "--nodes", "4", "--days", "1", "--trace", "@file:huge_trace.csv"], "larger than the fleet"),
    (["simulate", "--nodes", "4", "--days", "1", "--policy", "lottery"], "unknown policy 'lottery'; allowed"),
    (["simulate", "--nodes", "4", "--days", "1", "--recovery", "pray"], "unknown recovery mode"),
    (["simulate", "elastic", "--workload", "@file:bad_elastic.csv"], "bad_elastic.csv line 3: unknown application"),
    (["simulate", "elastic", "--policy", "lottery"], "unknown elastic policy 'lottery'"),
    (["simulate", "elastic", "--nodes", "0"], "nodes (0) and gpus_per_node (4) must be >= 1"),
    (
        ["simulate", "elastic", "--workload", "@file:elastic_bsz.csv"],
        "line 2: batch_size 100000000 > cifar10's maximum",
    ),
    (["simulate", "elastic", "--workload", "@file:elastic_nan.csv"], "line 2: finite time >= 0"),
    (["simulate", "elastic", "--interval", "nan"], "interval: must be 1 to 86400 s, got nan"),
    (["simulate", "elastic", "--interval", "1e-6"], "interval: must be 1 to 86400 s"),
    (["simulate", "elastic", "--policy", "pollux,lottery"], "unknown elastic policy 'lottery'"),
    (["simulate", "--nodes", "4", "--days", "1", "--priority", "lottery"], "unknown priority 'lottery'; allowed"),
    (
        ["simulate", "--nodes", "4", "--days", "1", "--policy", "kueue", "--priority", "multifactor"],
        "multifactor is Slurm's priority",
    ),
]

# planning / calibration / catalog UX: a profile of another device, only invalid instances, a model file of another kind
BAD_FILES.update(
    {
        "cpu_profile.json": '{"device": {"name": "AMD EPYC 7B13", "kind": "cpu", "catalog_gpu": null}, '
        '"measured_at": "2026-11-23T00:00:00", "gemm_efficiency": {"fp32": {"x": [1e6, 1e9], "y": [0.3, 0.6]}}}',
        "gpu_as_model.yaml": "kind: gpu\nname: X3\narchitecture: x\nbf16_dense_tflops: 1\nfp16_dense_tflops: 1\n"
        "hbm_gb: 1\nhbm_type: x\nhbm_bw_tbps: 1\ntdp_w: 1\n",
    }
)
_PLAN8 = ["plan", "train", "--model", "llama3.1-8b", "--tokens", "1e12"]
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--calibration",
      "@file:cpu_profile.json"], "calibration: profile measured on 'AMD EPYC 7B13' (cpu, no catalog GPU) but the "
     "cluster's GPU is H100"),
    ([*_PLAN8, "--instance", "p5.48xlarge", "--gpus", "8", "--calibration", "@file:cpu_profile.json"],
     "measure on H100 (fmstack bench all --device cuda --out profile.json)"),
    (["scale", "--model", "llama3.1-8b", "--tokens", "1e12", "--instance", "p5.48xlarge", "--gpus", "8", "--axis",
      "nodes", "--calibration", "@file:cpu_profile.json"], "calibration: fmstack scale does not apply"),
    ([*_PLAN8, "--instance", "u-p6e-gb200x72", "--gpus", "2048"], "must be a multiple of 18 p6e-gb200.36xlarge"),
    ([*_PLAN8, "--instance", "p5.48xlarge,u-p6e-gb200x72", "--gpus", "12"], "12 is not a multiple of 8 GPUs"),
    (["estimate", "train", "--model", "@file:gpu_as_model.yaml", "--instance", "p5.48xlarge"],
     "holds an entry of kind 'gpu', not a model"),
    (["catalog", "show", "instance", "u-p6e-gb200x99"], "unknown instance or ultraserver 'u-p6e-gb200x99'"),
    # simfix: non-finite floats and bench sizes refused before anything runs
    (["simulate", "--days", "nan"], "days: must be a finite number, got nan"),
    (["simulate", "--days", "inf"], "days: must be a finite number, got inf"),
    (["simulate", "--load", "nan"], "load: must be a finite number, got nan"),
    (["simulate", "--ckpt-interval", "inf"], "ckpt_interval: must be > 0 minutes, got inf"),
    (["bench", "collectives", "--ranks", "0"], "ranks: 0; a collective needs at least 2 processes"),
    (["bench", "gemm", "--min-time", "nan"], "min-time: nan; allowed: a finite number > 0 seconds"),
    (["bench", "gemm", "--max-dim", "0"], "max-dim: 0; allowed: >= 8"),
]  # fmt: skip

# review of 2026-11-23 (second round): impossible sweep values, flags that would be ignored, names and paths
BAD_FILES.update(
    {
        "two_models.yaml": "kind: model\nentries:\n  - name: a\n  - name: b\n",
        "job_pvc_name.yaml": "name: a\nimage: x:1\ncommand: ['true']\ncheckpoint: {location: /ckpt, pvc: Bad_Name}\n",
        "job_pvc_rel.yaml": "name: a\nimage: x:1\ncommand: ['true']\ncheckpoint: {location: ckpt, pvc: fsx}\n",
    }
)
_SCALE70 = ["scale", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "512", "--tokens", "2e12"]
BAD_ARGV += [
    ([*_SCALE70, "--axis", "nvlink", "--values", "0"], "values: NVLink domain 0 must be a positive multiple of 8"),
    ([*_SCALE70, "--axis", "nvlink", "--values", "-8"], "values: NVLink domain -8 must be a positive multiple of 8"),
    ([*_SCALE70, "--axis", "gpu", "--weak"], "weak: weak scaling grows the batch with the nodes; it needs --axis nodes"),
    ([*_SCALE70, "--axis", "nodes", "--calibration-force"], "calibration: fmstack scale does not apply"),
    ([*_PLAN8, "--instance", "p5.48xlarge", "--gpus", "8", "--calibration-force"],
     "calibration-force: applies a --calibration profile; none was given"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--calibration-force"],
     "calibration-force: applies a --calibration profile; none was given"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--overlap-ep"],
     "overlap-ep: llama3.1-8b is dense: it has no expert all-to-all to overlap"),
    (["estimate", "train", "--model", "@file:two_models.yaml", "--instance", "p5.48xlarge"],
     "must hold exactly one model entry, found 2"),
    (["launch", "@file:job_pvc_name.yaml", "--on", "kubernetes", "--dry-run"],
     "field 'checkpoint.pvc': Value error, must be a PersistentVolumeClaim name"),
    (["launch", "@file:job_pvc_rel.yaml", "--on", "kubernetes", "--dry-run"],
     "location 'ckpt' must be an absolute path: the claim is mounted there"),
]  # fmt: skip

# session 7, inference (helper A): add rows here
BAD_ARGV += []  # fmt: skip

# session 7, plan side review (helper B): add rows here
BAD_ARGV += [
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "inf"],
     "tokens: must be > 0 and finite, got inf"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "nan"],
     "tokens: must be > 0 and finite, got nan"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "inf"],
     "tokens: must be > 0 and finite, got inf"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "nan", "--axis",
      "nodes"], "tokens: must be > 0 and finite, got nan"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens", "1e12",
      "--seq-len", "1000000"], "seq_len: seq_len(1000000) is far beyond llama3.1-8b's max_seq_len(131072): at most"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--etp", "2"],
     "etp: llama3.1-8b is dense: it has no experts to split; etp(2) must be 1"),
    # these three ranges looped until memory ran out (0 doubled stays 0; a step <= 0 never reaches the end)
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "0-64", "--tokens", "1e12"],
     "gpus: range '0-64' must start at 1 or more GPUs, got 0"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64-512:-64", "--tokens",
      "1e12"], "gpus: range '64-512:-64' needs a step of 1 or more GPUs, got -64"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64-512:0", "--tokens", "1e12",
      "--axis", "nodes"], "gpus: range '64-512:0' needs a step of 1 or more GPUs, got 0"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "512-64", "--tokens", "1e12"],
     "gpus: range '512-64' ends (64) before it starts (512)"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8-8000000:8", "--tokens",
      "1e12"], "gpus: '8-8000000:8' asks for 1,000,000 GPU counts; at most 64 per search"),
]  # fmt: skip

# session 7, operations review (helper C): add rows here
BAD_ARGV += [
    (["simulate", "--nodes", "4", "--days", "1", "--jobs", "5", "--seed", "-1"], "seed: must be >= 0, got -1"),
    (["simulate", "compare", "--nodes", "4", "--days", "1", "--jobs", "5", "--seed", "-3"], "seed: must be >= 0"),
]  # fmt: skip

# session 7, lead: RL rollout as a finite batch
BAD_ARGV += [
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--length-spread", "1.5"],
     "length-spread: must be in [0, 1), got 1.5"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--length-spread", "nan"],
     "length-spread: must be in [0, 1), got nan"),
]  # fmt: skip

# session 7, operations round 2 (helper D): add rows here
BAD_FILES["job_topo_mode.yaml"] = "name: a\ncommand: ['true']\nqueue: q\ntopology: {mode: strict}\n"
BAD_FILES["job_topo_level.yaml"] = "name: a\ncommand: ['true']\nqueue: q\ntopology: {mode: required, level: 'a b'}\n"
BAD_FILES["job_topo_noqueue.yaml"] = "name: a\ncommand: ['true']\nimage: x\nnodes: 2\ntopology: {mode: required}\n"
BAD_FILES["job_url_fast.yaml"] = "name: a\ncommand: ['true']\ncheckpoint: {location: 's3://b/k'}\n"
BAD_ARGV += [
    (["cancel", "slurm:42", "--grace-s", "5"], "--grace-s: applies to local jobs only"),
    (["cancel", "local:x", "--grace-s", "-1"], "--grace-s: -1: must be a finite number of seconds >= 0"),
    (["cancel", "local:x", "--grace-s", "inf"], "--grace-s: inf: must be a finite number"),
    (["cancel", "local:x", "--now"], "--now: applies to Slurm jobs only"),
    (["plan", "--model", "llama3.1-8b"], "no option --model on fmstack plan itself: choose what to do first, 'fmstack plan train'"),
    (["estimate", "--tp", "8"], "no option --tp on fmstack estimate itself"),
    (["launch", "@file:job_topo_mode.yaml", "--on", "slurm", "--dry-run"], "field 'topology.mode'"),
    (["launch", "@file:job_topo_level.yaml", "--on", "slurm", "--dry-run"], "must be a node label key"),
    (["launch", "@file:job_topo_noqueue.yaml", "--on", "kubernetes", "--dry-run"], "topology.mode: 'required' needs a Kueue queue"),
    (["launch", "@file:job_url_fast.yaml", "--on", "slurm", "--dry-run"], "the fast tier must be a local"),
]  # fmt: skip

# session 7, lead: RL training layout and engine memory share
BAD_ARGV += [
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--rollout-memory-fraction", "1.5"],
     "rollout-memory-fraction: must be in (0, 1], got 1.5"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--train-ep", "0"],
     "train-ep: must be >= 1, got 0"),
]  # fmt: skip

# session 7, serving TP across domains (helper F)
# (the session-4 row "llama3.1-70b --tp 16 --nodes 2: TP must stay inside one domain" is valid now: removed above)
BAD_ARGV += [
    (["estimate", "serve", "--model", "gpt3-175b", "--instance", "p5.48xlarge", "--tp", "12", "--nodes", "2",
      "--input-len", "128", "--output-len", "128"], "TP must stay inside one domain or span whole domains"),
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "u-p6e-gb200x72", "--nodes", "18", "--tp", "128",
      "--input-len", "128", "--output-len", "128"], "tp(128) > 72 GPUs per NVLink domain and not a multiple of it"),
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "16", "--input-len", "128",
      "--output-len", "128"], "nodes: tp(16) needs 2 nodes of 8 GPUs; the cluster has 1 (8 GPUs)"),
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "16", "--pp", "2",
      "--nodes", "2", "--input-len", "128", "--output-len", "128"], "pp: tp(16) * pp(2) = 32 > 16 GPUs"),
]  # fmt: skip
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tp", "1", "--sp"],
     "sp: sequence parallelism splits activations over the tensor-parallel group; tp is 1"),
]  # fmt: skip
# session 7, RL switch (helper G)
BAD_ARGV += [
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--placement", "split",
      "--offload"], "offload: needs --placement colocated (split GPUs never switch between the phases)"),
]  # fmt: skip

# session 7, serving token budget (helper H's case)
BAD_ARGV += [
    (["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "2048",
      "--output-len", "128", "--max-num-tokens", "2048", "--qps", "20"], "qps: 20 requests/s exceeds one replica"),
]  # fmt: skip
BAD_ARGV += [
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--length-spread", "0.3", "--seed", "-1"],
     "seed: must be >= 0, got -1"),
]  # fmt: skip

# session 8, fleet twin review (helper A): add rows here
BAD_ARGV += [
    (["simulate", "--jobs", "100000000"], "jobs: must be 1 to 1,000,000"),
    (["simulate", "compare", "--jobs", "2000000"], "jobs: must be 1 to 1,000,000"),
    (["simulate", "--days", "1e9", "--jobs", "5"], "days: must be > 0 and <= 366"),
    (["simulate", "--nodes", "10000000", "--days", "1"], "nodes: must be 1 to 100,000"),
    (["simulate", "--nodes", "4", "--spares", "100000000", "--days", "1"], "spares: must be 0 to nodes (4)"),
    (["simulate", "elastic", "--nodes", "100000000"], "nodes (100,000,000) must be <= 1,024"),
    (["simulate", "elastic", "--gpus-per-node", "100000000"], "gpus_per_node (100,000,000) <= 16"),
]

# session 8, observability review (helper B): add rows here
BAD_FILES.update(
    {
        # a second "xids" key silently replaced the first: Xid 79 (reboot) became Xid 13 (restart job)
        "obs_signals_dup_key.json": '{"node": "n1", "xids": [79], "xids": [13]}',
        "obs_signals_nodes_extra.json": '{"nodes": [{"node": "n1", "xids": [79]}], "colour": "red"}',
        "obs_signals_nodes_int.json": '{"nodes": 5}',
        "obs_signals_bad_node.json": '[{"node": "n1", "xids": [79]}, {"node": "n2;reboot", "xids": [79]}]',
        # 7 GPUs seen and nothing to compare with: the engine decided NONE without a word
        "obs_signals_visible_only.json": '{"node": "n1", "gpus_visible": 7}',
        "obs_signals_efa_expected_only.json": '{"node": "n1", "efa_expected": 32}',
        "obs_alerts_not_api.json": '{"status": "success", "data": {"groups": []}}',
        "obs_alerts_labels.json": '[{"labels": {"alertname": "FmstackGpuMissing", "gpu": 3}, "state": "firing"}]',
        "obs_alerts_state.json": '{"data": {"alerts": [{"labels": {"alertname": "FmstackGpuMissing"}}]}}',
    }
)
BAD_ARGV += [
    (["health", "--signals", "@file:obs_signals_dup_key.json"], "obs_signals_dup_key.json: key 'xids' appears twice in one object"),
    (["health", "--signals", "@file:obs_signals_nodes_extra.json"], "signals.colour: unknown top-level field; allowed: nodes"),
    (["health", "--signals", "@file:obs_signals_nodes_int.json"], "signals.nodes: expected a list of node objects, got int"),
    (["health", "--signals", "@file:obs_signals_bad_node.json"], "signals[1].node: 'n2;reboot' is not a valid node name"),
    (["health", "--xid", "79", "--node", "n1 n2"], "--node: 'n1 n2' is not a valid node name"),
    (["health", "--signals", "@file:obs_signals_visible_only.json"], "signals[0].gpus_visible: needs gpus_expected"),
    (["health", "--signals", "@file:obs_signals_efa_expected_only.json"], "signals[0].efa_expected: needs efa_visible"),
    (["health", "--alerts", "@file:obs_alerts_not_api.json"], "alerts: expected the JSON of Prometheus /api/v1/alerts"),
    (["health", "--alerts", "@file:obs_alerts_labels.json"], "alerts[0].labels: expected an object of string labels"),
    (["health", "--alerts", "@file:obs_alerts_state.json"], "alerts.data.alerts[0].state: expected 'firing' or 'pending'"),
    (["health", "--alerts", "/nonexistent/alerts.json"], "--alerts: cannot read /nonexistent/alerts.json"),
    (["health", "--alerts", "@file:obs_alerts_state.json", "--xid", "79"], "--xid: use one of --signals, --alerts, --xid"),
    (["health", "--alerts", "@file:obs_alerts_state.json", "--node", "n1"], "--node: only with --xid"),
    # no GPU source, so fmstack_gpus_expected was silently not exported and FmstackGpuMissing could never fire
    (["exporter", "--backend", "none", "--no-efa", "--expected-gpus", "8", "--once"], "--expected-gpus: not with --backend none"),
]  # fmt: skip

# session 8, launch review (helper C): add rows here
BAD_FILES.update(
    {
        "job_mem.yaml": "name: a\nimage: x:1\ncommand: ['true']\ninstance: p5.48xlarge\nmemory_gib: 4096\n",
        "job_mem0.yaml": "name: a\nimage: x:1\ncommand: ['true']\nmemory_gib: 0\n",
    }
)
BAD_ARGV += [
    (["launch", "@file:job_mem.yaml", "--on", "kubernetes", "--dry-run"],
     "memory_gib: 4096 > 2048, the memory of one p5.48xlarge"),
    (["launch", "@file:job_mem0.yaml", "--on", "kubernetes", "--dry-run"], "field 'memory_gib'"),
]  # fmt: skip

# session 8, bench review (helper D): add rows here
BAD_ARGV += [
    (["bench", "gemm", "--trials", "0"], "trials: 0; allowed: >= 1"),
    (["bench", "collectives", "--trials", "-3"], "trials: -3; allowed: >= 1"),
    (["bench", "memory", "--out", "/proc/profile.json"], "in /proc"),
]  # fmt: skip

# session 8, lead
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "8", "--tp", "8",
      "--no-sp", "--overlap-tp"], "overlap-tp: overlaps the all-gather / reduce-scatter of sequence parallelism"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--overlap-tp"],
     "overlap-tp: overlaps the all-gather / reduce-scatter of sequence parallelism"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--calibration",
      "@file:cpu_profile.json", "--calibration-force"], "cannot calibrate a GPU even with --calibration-force"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--placement", "split",
      "--max-trajectory-age", "4"], "max-trajectory-age: 4 steps of lag needs --async"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--placement", "split",
      "--async", "--max-trajectory-age", "0"], "max-trajectory-age: must be >= 1, got 0"),
]  # fmt: skip

# session 8, simulator speed (helper E): add rows here
BAD_ARGV += []  # fmt: skip

# session 8, workload checkpoint on signal (helper F): add rows here
BAD_FILES.update(
    {
        "job_stop_warning.yaml": "name: a\nworkload: {steps: 10}\ngpus_per_node: 0\nlog_dir: /tmp\n"
        "checkpoint: {location: /tmp/fmstack-bad-stop}\nenv: {FMSTACK_STOP_WARNING_S: 2m}\n",
    }
)
BAD_ARGV += [
    (["launch", "@file:job_stop_warning.yaml", "--on", "slurm", "--dry-run"],
     "env.FMSTACK_STOP_WARNING_S: '2m': seconds before the time limit, an integer 0..65535"),
]  # fmt: skip

# session 8, multi-node serving plan (helper G): add rows here
BAD_ARGV += [
    (["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
      "--ttft-p99", "0.5", "--itl-p99", "0.05", "--max-nodes-per-replica", "0"],
     "max-nodes-per-replica: must be >= 1, got 0"),
    (["plan", "serve", "--model", "llama3.1-8b", "--qps", "1", "--input-len", "200000", "--output-len", "128",
      "--ttft-p99", "50", "--itl-p99", "0.5", "--instance", "p5.48xlarge"],
     "input-len: input_len(200000) + output_len(128) > max_seq_len(131072)"),
]  # fmt: skip

# session 8, kubernetes partial nodes (helper H): add rows here
BAD_FILES.update(
    {
        "job_huge_odd.yaml": "name: a\nimage: x:1\ncommand: ['true']\ninstance: p5.48xlarge\n"
        "kubernetes: {hugepages_2mi_mib: 5121}\n",
        "job_huge_unit.yaml": "name: a\nimage: x:1\ncommand: ['true']\ninstance: p5.48xlarge\n"
        "kubernetes: {hugepages_2mi_mib: 5120Mi}\n",
        "job_huge_nomem.yaml": "name: a\nimage: x:1\ncommand: ['true']\nkubernetes: {hugepages_2mi_mib: 2048}\n",
    }
)
BAD_ARGV += [
    (["launch", "@file:job_huge_odd.yaml", "--on", "kubernetes", "--dry-run"],
     "field 'kubernetes.hugepages_2mi_mib': Value error, must be a whole number of 2 MiB pages"),
    (["launch", "@file:job_huge_unit.yaml", "--on", "pytorchjob", "--dry-run"],
     "field 'kubernetes.hugepages_2mi_mib': Input should be a valid integer"),
    (["launch", "@file:job_huge_nomem.yaml", "--on", "kubernetes", "--dry-run"],
     "kubernetes.hugepages_2mi_mib: 2048 MiB of huge pages need a memory request"),
]  # fmt: skip

# session 8, fresh-user walk-through (helper I): add rows here
BAD_ARGV += [
    (["plan", "train", "--model", "llama3.1-7b", "--instance", "p5.48xlarge", "--gpus", "512", "--tokens", "2e12"],
     "did you mean 'llama3.1-70b' or 'llama3.1-8b'?"),
    (["estimate", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarg", "--nodes", "4"],
     "unknown instance 'p5.48xlarg'; did you mean 'p5.48xlarge'"),
    (["plan", "train", "--model", "llama3.1-70b", "--instance", "u-p6e-gb200x7", "--gpus", "72", "--tokens", "2e12"],
     "did you mean 'u-p6e-gb200x72'"),
    (["catalog", "show", "instance", "p5en"], "did you mean 'p5en.48xlarge'?"),
    (["plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "500", "--tokens", "2e12"],
     "500 is not a multiple of 8 GPUs per p5.48xlarge node; nearest: 496 (62 nodes) or 504 (63 nodes)"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "4"],
     "4 is not a multiple of 8 GPUs per node; nearest: 8 (1 node)"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "u-p6e-gb200x72", "--nodes", "20"],
     "per 72-GPU NVLink domain (18 x 4 GPUs); nearest: 18 nodes (72 GPUs) or 36 nodes (144 GPUs)"),
    # estimate's options on the commands that search them: where they belong, not "Did you mean '--top'?"
    (["plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "512", "--tokens", "2e12",
      "--tp", "8"], "no option --tp: fmstack plan train searches every layout; to price one layout, give it to fmstack"),
    (["plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "64", "--tokens", "2e12"],
     "no option --nodes: fmstack plan train takes the GPU count, --gpus"),
    (["scale", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "512", "--tokens", "2e12", "--axis",
      "nodes", "--pp", "2"], "no option --pp: fmstack scale searches every layout"),
]  # fmt: skip

# session 9, RL step model (helper R): add rows here
BAD_ARGV += [
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--response-len", "1024",
      "--response-cap", "512"], "response-cap: must be >= --response-len (1024), got 512"),
]  # fmt: skip

# session 9, serving planner search (helper S): add rows here
BAD_ARGV += [
    # --top 0 printed a table of no rows and --top -1 silently dropped the last candidate
    (["plan", "serve", "--model", "deepseek-v3", "--qps", "15", "--input-len", "2048", "--output-len", "256",
      "--ttft-p99", "2", "--itl-p99", "0.1", "--instance", "p5en.48xlarge", "--top", "0"], "top: must be >= 1"),
]  # fmt: skip

# session 9, closing-loop predictor (helper C): add rows here
BAD_ARGV += []

# session 9, fresh-eyes operations review (helper W): add rows here
BAD_ARGV += [
    # an output path that is a directory: was a traceback (IsADirectoryError, exit 1) after the whole run, and a
    # stray tmp*.tmp file left beside it
    (["simulate", "--nodes", "2", "--days", "0.1", "--jobs", "5", "--html", "."],
     "--html: . is a directory; give a file name"),
    (["simulate", "--nodes", "2", "--days", "0.1", "--jobs", "5", "--metrics", "no/such/dir/run.om"],
     "--metrics: directory no/such/dir does not exist"),
    # a node twice in one signals file: both decisions were rendered, the later winning (an entry without signals
    # after an Xid 79 one relabelled the node Schedulable and removed its NoSchedule taint)
    (["health", "--signals", "@file:dup_node_signals.json", "--format", "k8s"],
     "signals[1].node: 'n1' is also signals[0]; give one object per node"),
    # the README's verb table says "observe" and "measure": not commands, so say which ones are
    (["observe"], "No such command 'observe': to observe, use fmstack exporter"),
    (["measure", "--help"], "No such command 'measure': to measure, use fmstack bench"),
    # exporter modes that each do one thing and exit: the second was silently not done
    (["exporter", "--print-rules", "--dashboards", "grafana"], "one of --print-rules, --dashboards, --once at a time"),
    (["exporter", "--backend", "fake", "--no-efa", "--once", "--force"], "--force: only with --dashboards DIR"),
    # several policies given to simulate itself: say where several go
    (["simulate", "--policy", "fifo,sjf"], "to compare several, use fmstack simulate compare --policy A,B"),
    (["simulate", "--recovery", "auto-resume,elastic"], "recovery: one recovery mode, got 'auto-resume,elastic'"),
    # an empty JobSpec file said "a JobSpec must be a mapping, got NoneType"
    (["launch", "@file:job_empty.yaml", "--on", "slurm", "--dry-run"], "job_empty.yaml: is empty; the smallest JobSpec"),
    # a model file name that does not exist: was "unknown model 'nope.yaml'; known: <29 names>"
    (["catalog", "show", "model", "nope.yaml"], "model: model file 'nope.yaml' does not exist"),
    # a mistyped command: was "No such command 'simulat'." with no suggestion
    (["simulat", "--days", "1"], "No such command 'simulat'; did you mean 'simulate'"),
]  # fmt: skip
BAD_FILES["job_empty.yaml"] = "# a JobSpec\n"
BAD_FILES["dup_node_signals.json"] = '{"nodes": [{"node": "n1", "xids": [79]}, {"node": "n1"}]}'

# session 10, disaggregated serving candidates (helper A): add rows here
BAD_ARGV += [
    # a split needs a prefill and a decode replica: one tp 8 replica on one node cannot be split
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--disagg",
      "--input-len", "2048", "--output-len", "256"], "gpus: disaggregation needs at least 2 replicas of tp(8)"),
    # a TTFT below one 8k-token prefill: no colocated row and no split meets it (the split search is on)
    (["plan", "serve", "--model", "llama3.1-70b", "--qps", "5", "--input-len", "8192", "--output-len", "256",
      "--ttft-p99", "0.05", "--itl-p99", "0.03", "--instance", "p5.48xlarge"], "slo: no deployment meets TTFT 0.05 s"),
]  # fmt: skip

# session 10, RL step stages (helper B): add rows here

# session 10, property-based invariants (helper C): add rows here
BAD_ARGV += [
    # fp8 on a GPU without FP8 tensor cores: plan refused it, estimate ran it at the BF16 peak and called it fp8
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "dgx-a100", "--precision", "fp8"],
     "precision: A100-80GB has no 'fp8' peak"),
]  # fmt: skip

# session 10, fresh-eyes serving and RL review (helper G): add rows here
BAD_ARGV += [
    # EP that does not divide the experts: the message names the expert count and the EP degrees allowed
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--tp", "8", "--ep", "3",
      "--precision", "fp8", "--input-len", "2048", "--output-len", "100", "--concurrency", "8"],
     "ep: ep(3) needs an MoE model, must divide tp(8) and the experts: deepseek-v3 has 256; allowed: 1, 2, 4, 8"),
    # EP on a dense model
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8", "--ep", "2",
      "--input-len", "2048", "--output-len", "100", "--concurrency", "8"],
     "the experts: llama3.1-70b is dense"),
]  # fmt: skip

# session 10, simulated splits in estimate serve (helper H): add rows here
_SPLIT = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "2", "--precision",
          "fp8", "--input-len", "8192", "--output-len", "256", "--no-simulate"]  # fmt: skip
BAD_ARGV += [
    ([*_SPLIT, "--qps", "5", "--prefill-replicas", "6", "--decode-replicas", "1"],
     "nodes: 6 prefill + 1 decode replicas of tp 2 x pp 1 need 14 GPUs; 1 x p5.48xlarge has 8"),
    ([*_SPLIT, "--nodes", "2", "--qps", "5", "--prefill-replicas", "6"],
     "prefill-replicas: give both --prefill-replicas and --decode-replicas"),
    ([*_SPLIT, "--nodes", "2", "--prefill-replicas", "6", "--decode-replicas", "1"], "qps: a split is simulated at"),
    ([*_SPLIT, "--nodes", "2", "--qps", "5", "--prefill-replicas", "0", "--decode-replicas", "1"],
     "prefill-replicas: need at least one prefill and one decode replica, got 0:1"),
    ([*_SPLIT, "--nodes", "2", "--qps", "0", "--prefill-replicas", "6", "--decode-replicas", "1"],
     "qps: must be > 0, got 0.0"),
]  # fmt: skip

# session 10, GB200 multi-node NVLink on Kubernetes (helper I): add rows here
BAD_FILES.update(
    {
        "job_cd_upper.yaml": "name: a\nimage: x:1\ncommand: ['true']\ninstance: p6e-gb200.36xlarge\nnodes: 2\n"
        "kubernetes: {compute_domain: Auto}\n",
        "job_cd_int.yaml": "name: a\nimage: x:1\ncommand: ['true']\ninstance: p6e-gb200.36xlarge\nnodes: 2\n"
        "kubernetes: {compute_domain: 1}\n",
        "job_cd_p5.yaml": "name: a\nimage: x:1\ncommand: ['true']\ninstance: p5.48xlarge\nnodes: 2\n"
        "kubernetes: {compute_domain: my-channel}\n",
        "job_cd_noinst.yaml": "name: a\nimage: x:1\ncommand: ['true']\nkubernetes: {compute_domain: my-channel}\n",
    }
)
BAD_ARGV += [
    # a keyword is lowercase; anything else must be a ResourceClaimTemplate name (a DNS-1123 subdomain)
    (["launch", "@file:job_cd_upper.yaml", "--on", "kubernetes", "--dry-run"],
     "field 'kubernetes.compute_domain': Value error, must be auto, none or a ResourceClaimTemplate name"),
    (["launch", "@file:job_cd_int.yaml", "--on", "pytorchjob", "--dry-run"],
     "field 'kubernetes.compute_domain': Input should be a valid string"),
    # a channel named for an instance whose NVLink domain is one node: nothing to claim
    (["launch", "@file:job_cd_p5.yaml", "--on", "kubernetes", "--dry-run"],
     "kubernetes.compute_domain: 'my-channel': p5.48xlarge (nvlink_domain_gpus 8, not above one node's 8 GPUs) has no "
     "multi-node NVLink to claim; allowed: auto or none"),
    (["launch", "@file:job_cd_noinst.yaml", "--on", "kubernetes", "--dry-run"],
     "kubernetes.compute_domain: 'my-channel': a job without an instance (or without GPUs) has no multi-node NVLink"),
]  # fmt: skip

# session 10, review of the session's change (helper R): add rows here
BAD_ARGV += [
    # --concurrency beside a split's --qps: the colocated rows' "not both" error was swallowed into a note (exit 0)
    ([*_SPLIT, "--nodes", "2", "--qps", "5", "--concurrency", "4", "--prefill-replicas", "6", "--decode-replicas", "1"],
     "concurrency: a split is simulated at --qps (the whole deployment's rate); drop --concurrency"),
]  # fmt: skip

# session 10, heterogeneous prefill/decode pools (helper J): add rows here
BAD_ARGV += [
    # a decode pool's TP must divide the heads (64 query heads, 8 KV heads of llama3.1-70b)
    ([*_SPLIT, "--nodes", "2", "--qps", "5", "--prefill-replicas", "3", "--decode-replicas", "1", "--decode-tp", "3"],
     "decode-tp: decode pool: tp(3) must divide num_heads(64)"),
    # 6 prefill replicas of tp 2 and 1 decode replica of tp 8 need 20 GPUs; 2 nodes have 16
    ([*_SPLIT, "--nodes", "2", "--qps", "5", "--prefill-replicas", "6", "--decode-replicas", "1", "--decode-tp", "8"],
     "nodes: 6 prefill + 1 decode replicas of tp 2 x pp 1 (prefill) and tp 8 x pp 1 (decode) need 20 GPUs"),
    # the decode layout belongs to a split
    ([*_SPLIT, "--decode-tp", "4"], "decode-tp: --decode-tp / --decode-pp / --decode-ep set a split's decode pool"),
]  # fmt: skip

# session 11, Slurm on GB200 (helper S): add rows here
_GB = "name: a\ncommand: ['true']\ninstance: p6e-gb200.36xlarge\n"
BAD_FILES.update(
    {
        "job_seg_7.yaml": _GB + "nodes: 36\nslurm: {segment: 7}\n",
        "job_seg_36.yaml": _GB + "nodes: 36\nslurm: {segment: 36}\n",
        "job_seg_upper.yaml": _GB + "nodes: 2\nslurm: {segment: Auto}\n",
        "job_seg_zero.yaml": _GB + "nodes: 2\nslurm: {segment: 0}\n",
        "job_seg_p5.yaml": "name: a\ncommand: ['true']\ninstance: p5.48xlarge\nnodes: 2\nslurm: {segment: 2}\n",
    }
)
BAD_ARGV += [
    # a segment must divide the nodes and fit one 18-node NVL72 rack (72 GPUs / 4 per node)
    (["launch", "@file:job_seg_7.yaml", "--on", "slurm", "--dry-run"],
     "slurm.segment: 7: a segment must divide nodes(36) and lie in one NVLink domain of 18 nodes (72 GPUs / 4 per "
     "p6e-gb200.36xlarge); allowed: auto, none or one of 1, 2, 3, 4, 6, 9, 12, 18"),
    (["launch", "@file:job_seg_36.yaml", "--on", "slurm", "--dry-run"],
     "slurm.segment: 36: a segment must divide nodes(36) and lie in one NVLink domain of 18 nodes"),
    (["launch", "@file:job_seg_upper.yaml", "--on", "slurm", "--dry-run"],
     "field 'slurm.segment': Value error, must be auto, none or a number of nodes >= 1 (given 'Auto')"),
    (["launch", "@file:job_seg_zero.yaml", "--on", "slurm", "--dry-run"],
     "field 'slurm.segment': Value error, must be auto, none or a number of nodes >= 1 (given 0)"),
    # an explicit segment where the NVLink domain is one node
    (["launch", "@file:job_seg_p5.yaml", "--on", "slurm", "--dry-run"],
     "slurm.segment: 2: p5.48xlarge (nvlink_domain_gpus 8, not above one node's 8 GPUs) has no NVLink domain of "
     "several nodes; allowed: auto or none"),
]  # fmt: skip

# session 11, disaggregation side check (helper D): add rows here
BAD_ARGV += []

# session 11, attention-DP disaggregation (helper E): add rows here
BAD_ARGV += [
    (["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "2", "--tp", "8",
      "--input-len", "2048", "--output-len", "128", "--qps", "2", "--prefill-replicas", "1", "--decode-replicas", "1",
      "--decode-attention-dp"], "decode-attention-dp: decode pool: attention data parallelism needs an MoE model"),
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--tp", "8", "--ep", "8",
      "--precision", "fp8", "--input-len", "2048", "--output-len", "128", "--decode-attention-dp"],
     "decode-tp: --decode-tp / --decode-pp / --decode-ep set a split's decode pool (as --[no-]decode-attention-dp"),
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--nodes", "2", "--tp", "8",
      "--ep", "8", "--precision", "fp8", "--input-len", "2048", "--output-len", "128", "--qps", "2",
      "--prefill-replicas", "1", "--decode-replicas", "1", "--attention-dp", "--max-batch", "4"],
     "attention-dp: a decode replica holds 4 sequences of 2176 tokens, fewer than one per each of its 8 ranks"),
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--nodes", "2", "--tp", "8",
      "--ep", "8", "--precision", "fp8", "--input-len", "2048", "--output-len", "128", "--qps", "2",
      "--prefill-replicas", "1", "--decode-replicas", "1", "--attention-dp", "--decode-ep", "4"],
     "decode-attention-dp: decode pool: attention data parallelism needs an MoE model and ep == tp, got ep(4) tp(8)"),
]  # fmt: skip

# session 11, review: flags that would be silently ignored are refused (lead)
_SERVE70 = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--input-len", "2048",
            "--output-len", "256"]  # fmt: skip
BAD_ARGV += [
    ([*_SERVE70, "--nodes", "4", "--tp", "8", "--concurrency", "64"],
     "nodes: --nodes 4: estimate serve predicts one replica, and tp 8 x pp 1 uses 1 node(s)"),
    # review 3: plan rl refusals that named the wrong field or ignored a flag; a log-normal at its cap
    (["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--placement", "split"],
     "nodes: split and async placements put rollout and training on nodes of their own: they need --nodes 2"),
    (["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--max-trajectory-age",
      "3", "--placement", "colocated"], "max-trajectory-age: 3 steps of lag apply to async rows; add async"),
    (["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--response-len",
      "200000"], "response-len: prompt-len(1024) + response-len(200000) = 201024 tokens > llama3.1-8b's context"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--response-len", "795",
      "--length-dist", "lognormal", "--clip-ratio", "0.02", "--response-cap", "795"],
     "response-cap: a mean of response-len(795) at response-cap(795) needs every response at the cap"),
    # --html . : a traceback (IsADirectoryError) after the whole search, now refused before it
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e9",
      "--html", "."], "html: . is a directory; give a file name, e.g. plan.html"),
    ([*_SERVE70, "--tp", "8", "--ttft-slo", "0.1"], "ttft-slo: --ttft-slo is the target of --disagg's comparison"),
    ([*_SERVE70, "--tp", "8", "--itl-slo", "0.01"], "itl-slo: --itl-slo is the target of --disagg's comparison"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--prompts", "256",
      "--samples", "8", "--minibatches", "3"],
     "minibatches: 3 does not divide the step's 256 prompts x 8 samples = 2048 sequences; allowed: 1, 2, 4, 8"),
]  # fmt: skip

# session 11, plan rl (helper P): add rows here
_PLAN_RL = ["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge"]
BAD_ARGV += [
    ([*_PLAN_RL, "--nodes", "0"], "nodes: must be node counts >= 1"),
    ([*_PLAN_RL, "--nodes", "two"], "nodes: 'two' is not a count"),
    ([*_PLAN_RL, "--nodes", "8-2"], "nodes: range '8-2' must start at 1 or more"),
    ([*_PLAN_RL, "--nodes", "2", "--placement", "hybrid"], "placement: 'hybrid' unknown"),
    ([*_PLAN_RL, "--nodes", "2", "--top", "0"], "top: must be >= 1"),
    ([*_PLAN_RL, "--nodes", "2", "--max-trajectory-age", "0"], "max-trajectory-age: must be >= 1"),
    ([*_PLAN_RL, "--nodes", "2", "--minibatches", "3"], "minibatches: 3 does not divide"),
    (
        ["plan", "rl", "--model", "llama3.1-8b", "--instance", "dgx-h100", "--nodes", "2", "--objective", "cost"],
        "objective: cost needs a price for dgx-h100",
    ),
    (
        ["plan", "rl", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "1"],
        "model: nothing fits in GPU memory on 1 x p5.48xlarge: the closest is",
    ),
]

# session 11, RL response-length distribution (helper L): add rows here
_RL_LEN = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "dgx-h100", "--prompts", "64", "--samples", "32",
           "--prompt-len", "130", "--response-len", "795", "--rollout-tp", "1", "--train-tp", "1"]  # fmt: skip
BAD_ARGV += [
    ([*_RL_LEN, "--length-dist", "lognormal", "--clip-ratio", "0.02"],
     "clip-ratio: is the share of responses reaching the cap: needs --response-cap"),
    ([*_RL_LEN, "--length-dist", "lognormal", "--clip-ratio", "0", "--response-cap", "3966"],
     "clip-ratio: must be in (0, 1), got 0.0"),
    ([*_RL_LEN, "--length-dist", "lognormal", "--clip-ratio", "1.5", "--response-cap", "3966"],
     "clip-ratio: must be in (0, 1), got 1.5"),
    ([*_RL_LEN, "--length-dist", "lognormal", "--length-cv", "-0.5"], "length-cv: must be >= 0, got -0.5"),
    ([*_RL_LEN, "--length-dist", "lognormal", "--clip-ratio", "0.25", "--response-cap", "3966"],
     "clip-ratio: no log-normal has both: the capped responses alone give a mean of clip-ratio(0.25) x "
     "response-cap(3966) = 992 >= response-len(795)"),
    ([*_RL_LEN, "--clip-ratio", "0.02", "--response-cap", "3966"],
     "clip-ratio: sets a log-normal; needs --length-dist lognormal"),
    ([*_RL_LEN, "--length-dist", "lognormal"],
     "length-dist: lognormal needs exactly one of --clip-ratio (with --response-cap) and --length-cv, got neither"),
    ([*_RL_LEN, "--length-dist", "lognormal", "--length-cv", "1", "--clip-ratio", "0.02", "--response-cap", "3966"],
     "length-dist: lognormal needs exactly one of --clip-ratio (with --response-cap) and --length-cv, got both"),
]  # fmt: skip

# session 11, KV transfer per prefill/decode pair by placement (helper K): add rows here
BAD_ARGV += []

# session 11, plan rl --html (helper H): add rows here
BAD_ARGV += [
    ([*_PLAN_RL, "--nodes", "2", "--html", "/nonexistent-dir/rl.html"], "html: folder /nonexistent-dir does not exist"),
    ([*_PLAN_RL, "--nodes", "2", "--html", "."], "html: . is a directory; give a file name, e.g. rl-plan.html"),
]

# session 12, --calibration for estimate serve / plan serve / estimate rl (helper C): add rows here
BAD_FILES.update(
    {
        "b200_profile.json": '{"device": {"name": "NVIDIA B200", "kind": "cuda", "catalog_gpu": "B200", '
        '"peak_memory_bw_gbps": 8000}, "measured_at": "2026-11-23T00:00:00", '
        '"memory_bw_gbps": {"x": [1e9], "y": [6000]}}',
        "h100_profile.json": '{"device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda", "catalog_gpu": "H100", '
        '"peak_memory_bw_gbps": 3350}, "measured_at": "2026-11-23T00:00:00", '
        '"memory_bw_gbps": {"x": [1e9], "y": [2680]}}',
        "broken_profile.json": '{"device": {"name": "NVIDIA H100 80GB HBM3",',
    }
)
_CAL_SERVE = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "128",
              "--output-len", "128"]  # fmt: skip
_CAL_PLAN_SERVE = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
                   "--ttft-p99", "0.5", "--itl-p99", "0.05"]  # fmt: skip
_CAL_RL = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "64", "--samples",
           "8", "--prompt-len", "512", "--response-len", "512", "--rollout-tp", "1", "--train-tp", "1"]  # fmt: skip
_CAL_PLAN_RL = ["plan", "rl", "--model", "llama3.1-8b", "--nodes", "1", "--prompts", "64", "--samples", "8",
                "--prompt-len", "512", "--response-len", "512"]  # fmt: skip
_OTHER_GPU = ("calibration: profile measured on 'NVIDIA B200' (cuda, catalog GPU B200) but the cluster's GPU is H100; "
              "a profile calibrates only the GPU it was measured on")  # fmt: skip
_FORCE_ALONE = "calibration-force: applies a --calibration profile; none was given"
_CPU_FORCED = "cannot calibrate a GPU even with --calibration-force"
BAD_ARGV += [
    ([*_CAL_SERVE, "--calibration", "@file:b200_profile.json"], _OTHER_GPU),
    ([*_CAL_SERVE, "--nodes", "2", "--disagg", "--calibration", "@file:b200_profile.json"], _OTHER_GPU),
    ([*_CAL_SERVE, "--calibration-force"], _FORCE_ALONE),
    ([*_CAL_SERVE, "--calibration", "@file:cpu_profile.json", "--calibration-force"], _CPU_FORCED),
    ([*_CAL_SERVE, "--calibration", "/nonexistent/profile.json"], "calibration: cannot read /nonexistent/profile.json"),
    ([*_CAL_SERVE, "--calibration", "@file:broken_profile.json"], "is not valid JSON at line 1"),
    ([*_CAL_SERVE, "--calibration", "@file:not_profile.json"], "field 'device': missing required field"),
    ([*_CAL_PLAN_SERVE, "--instance", "p5.48xlarge", "--calibration", "@file:b200_profile.json"], _OTHER_GPU),
    ([*_CAL_PLAN_SERVE, "--calibration", "@file:h100_profile.json"],
     "or pass --calibration-force to apply it anyway; without --instance plan serve searches every priced instance"),
    ([*_CAL_PLAN_SERVE, "--instance", "p5.48xlarge", "--calibration-force"], _FORCE_ALONE),
    ([*_CAL_PLAN_SERVE, "--calibration", "@file:cpu_profile.json", "--calibration-force"], _CPU_FORCED),
    ([*_CAL_RL, "--calibration", "@file:b200_profile.json"], _OTHER_GPU),
    ([*_CAL_RL, "--calibration-force"], _FORCE_ALONE),
    ([*_CAL_RL, "--calibration", "@file:cpu_profile.json", "--calibration-force"], _CPU_FORCED),
    ([*_CAL_RL, "--calibration", "/nonexistent/profile.json"], "calibration: cannot read /nonexistent/profile.json"),
    ([*_CAL_PLAN_RL, "--instance", "p5.48xlarge,p6-b200.48xlarge", "--calibration", "@file:h100_profile.json"],
     "catalog GPU H100) but the cluster's GPU is B200"),
    ([*_CAL_PLAN_RL, "--instance", "p5.48xlarge", "--calibration-force"], _FORCE_ALONE),
    ([*_CAL_PLAN_RL, "--instance", "p5.48xlarge", "--calibration", "@file:cpu_profile.json", "--calibration-force"],
     _CPU_FORCED),
]  # fmt: skip

# session 12, simulate: backfill window, time limits, trace rows (helper S): add rows here
BAD_FILES["sim_trace_extra_field.csv"] = "job_id,submit_s,num_gpus,duration_s,user,queue\n1,0,8,3600,smith,john,q1\n"
BAD_FILES["sim_trace_short_row.csv"] = "job_id,submit_s,num_gpus,duration_s,user,queue\n1,0,8,3600,u1,q1\n2,0,8,3600\n"
_SIM2 = ["simulate", "--nodes", "2", "--days", "1"]
BAD_ARGV += [
    ([*_SIM2, "--trace", "@file:sim_trace_extra_field.csv"],
     "sim_trace_extra_field.csv line 2: 7 fields, the header has 6; quote a value that holds a comma"),
    ([*_SIM2, "--trace", "@file:sim_trace_short_row.csv"], "sim_trace_short_row.csv line 3: 4 fields, the header has 6"),
    ([*_SIM2, "--bf-window", "0"], "bf_window: must be 1 to 43,200 minutes (Slurm's range), got 0"),
    (["simulate", "compare", "--nodes", "2", "--days", "1", "--bf-window", "43201"], "bf_window: must be 1 to 43,200"),
]  # fmt: skip

# session 12, launch: array checkpoints, container mounts (helper L): add rows here
BAD_FILES.update(
    {
        "job_nodes_bool.yaml": "name: a\ncommand: ['true']\nnodes: true\n",
        "job_steps_float.yaml": "name: a\nworkload: {steps: 2.5}\n",
        "job_mount_rel.yaml": "name: a\ncommand: ['true']\nimage: x\ncontainer_mounts: [fsx/hf]\n",
        "job_mount_flags.yaml": "name: a\ncommand: ['true']\nimage: x\ncontainer_mounts: ['/a:/b:rx']\n",
    }
)
BAD_ARGV += [
    # a boolean used to become --nodes=1; a float step count was truncated or refused depending on its value
    (["launch", "@file:job_nodes_bool.yaml", "--on", "slurm", "--dry-run"],
     "field 'nodes': Input should be a valid integer (given True)"),
    (["launch", "@file:job_steps_float.yaml", "--on", "slurm", "--dry-run"],
     "field 'workload.steps': Input should be a valid integer (given 2.5)"),
    (["launch", "@file:job_mount_rel.yaml", "--on", "slurm", "--dry-run"],
     "field 'container_mounts': Value error, 'fsx/hf': mount paths must be absolute"),
    (["launch", "@file:job_mount_flags.yaml", "--on", "slurm", "--dry-run"],
     "field 'container_mounts': Value error, '/a:/b:rx' must be PATH, SRC:DST or SRC:DST:ro"),
]  # fmt: skip

# session 12, health: Xid catalog, NVLink reasons (helper H): add rows here
BAD_ARGV += []

# session 13, launch / observe review fixes (helper O): add rows here
_K8S_JOB = "nodes: 4\ninstance: p5.48xlarge\nimage: repo/img:1\nworkload: {model: tiny}\n"
BAD_FILES.update(
    {
        "job_k8s_digit.yaml": "name: 7b-pretrain\n" + _K8S_JOB,
        "job_k8s_long.yaml": "name: " + "a" * 46 + "\n" + _K8S_JOB,
        "job_requeue_0.yaml": "name: a\ncommand: ['true']\nretry: {requeue_exit_codes: [0]}\n",
        "job_requeue_256.yaml": "name: a\ncommand: ['true']\nretry: {requeue_exit_codes: [75, 256]}\n",
    }
)
BAD_ARGV += [
    # JobSet subdomain and PyTorchJob name are DNS-1035 labels (a letter first); Slurm and local take the name
    (["launch", "@file:job_k8s_digit.yaml", "--on", "kubernetes", "--dry-run"],
     "name: '7b-pretrain' starts with a digit: a JobSet name must be a DNS-1035 label"),
    (["launch", "@file:job_k8s_digit.yaml", "--on", "pytorchjob", "--dry-run"],
     "name: '7b-pretrain' starts with a digit: a PyTorchJob name must be a DNS-1035 label"),
    # 46 + len("-trainer-0-3-xxxxx") = 64 > 63: the JobSet webhook refuses the pod names of 4 nodes
    (["launch", "@file:job_k8s_long.yaml", "--on", "kubernetes", "--dry-run"],
     "name: '" + "a" * 46 + "' is 46 characters; at most 45 for this JobSet: its longest pod name"),
    # 0 would requeue a job that succeeded; an exit status is 0..255
    (["launch", "@file:job_requeue_0.yaml", "--on", "slurm", "--dry-run"],
     "field 'retry.requeue_exit_codes': Value error, [0]: exit codes that requeue must be 1..255 (0 is success"),
    (["launch", "@file:job_requeue_256.yaml", "--on", "slurm", "--dry-run"],
     "field 'retry.requeue_exit_codes': Value error, [256]: exit codes that requeue must be 1..255"),
]  # fmt: skip

# session 13, training catalog / scale review fixes (helper T): add rows here
_US = ("kind: ultraserver\nentries:\n  - name: u-p6e-gb200x72\n    instance: p6e-gb200.36xlarge\n    num_instances: 18\n"
       "    num_gpus: {gpus}\n    hbm_aggregate_tb: {tb}\n    network: {net}\n    network_bw_gbps: 3600\n")  # fmt: skip
_DGX = ("kind: instance\nentries:\n  - name: dgx-tiny\n    gpu: A100-80GB\n    num_gpus: 8\n    gpu_memory_gb: {mem}\n"
        "    vcpus: 256\n    host_memory_gib: 2048\n    nvlink_domain_gpus: 8\n    network: ib-hdr\n"
        "    network_bw_gbps: 200\n")  # fmt: skip
BAD_FILES.update(
    {
        "us_gpus.yaml": _US.format(gpus=64, tb=13.4, net="efa-v4"),
        "us_hbm.yaml": _US.format(gpus=72, tb=1.34, net="efa-v4"),
        "us_net.yaml": _US.format(gpus=72, tb=13.4, net="efa-v9"),
        "dgx_mem.yaml": _DGX.format(mem=8),
    }
)
_EST8 = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge"]
_SCALE_GB200 = ["scale", "--model", "llama3.1-8b", "--instance", "p6e-gb200.36xlarge", "--gpus", "72", "--tokens", "1e12"]  # fmt: skip
BAD_ARGV += [
    (["catalog", "list", "--catalog", "@dir:us_gpus.yaml"],
     "ultraserver 'u-p6e-gb200x72' field 'num_gpus': 64 != num_instances(18) x 4 GPUs per p6e-gb200.36xlarge = 72"),
    (["catalog", "list", "--catalog", "@dir:us_hbm.yaml"],
     "field 'hbm_aggregate_tb': 1.34 TB does not match num_gpus(72) x GB200 hbm_gb(186 GB) = 13.392 TB"),
    (["catalog", "list", "--catalog", "@dir:us_net.yaml"], "ultraserver 'u-p6e-gb200x72' field 'network': unknown fabric"),
    (["catalog", "list", "--catalog", "@dir:dgx_mem.yaml"],
     "instance 'dgx-tiny' field 'gpu_memory_gb': 8 GB does not match num_gpus(8) x A100-80GB hbm_gb(80 GB) = 640 GB"),
    ([*_PLAN8, "--instance", "p5.48xlarge", "--gpus", "8.9"], "gpus: '8.9' is not a whole number of GPUs"),
    ([*_PLAN8, "--instance", "u-p6e-gb200x72", "--gpus", "72", "--objective", "cost"],
     "cost needs a price for u-p6e-gb200x72: set price_per_hour_usd on ultraserver u-p6e-gb200x72 (per UltraServer-hour)"),
    ([*_EST8, "--tp", "2", "--sharding", "hsdp"],
     "hsdp-shard-size: the HSDP shard group of 8 data-parallel ranks must divide dp(4): give --hsdp-shard-size one of "
     "1, 2, 4"),
    ([*_EST8, "--hsdp-shard-size", "4"], "hsdp-shard-size: sets the HSDP shard group; it needs --sharding hsdp"),
    ([*_SCALE70, "--axis", "nvlink", "--values", "3"],
     "values: NVLink domain 3 must be a positive multiple of 8 GPUs per node, or divide it (1, 2, 4)"),
    (["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge,p5en.48xlarge", "--gpus", "64", "--tokens", "1e12"],
     "instance: fmstack scale takes one instance or UltraServer, got 'p5.48xlarge,p5en.48xlarge'"),
    ([*_SCALE70, "--calibration", "@dir:us_gpus.yaml"], "calibration: fmstack scale does not apply a calibration profile"),
    ([*_SCALE_GB200, "--axis", "nvlink", "--values", "16,32"],
     "values: no value of --axis nvlink could be planned; 16: skipped: num_nodes(18) must be a multiple of 4"),
]  # fmt: skip

# session 13, serve / rl review fixes (helper S): add rows here
_S8 = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "512",
       "--output-len", "128"]  # fmt: skip
_S70 = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "2", "--tp", "2",
        "--precision", "fp8", "--input-len", "8192", "--output-len", "256", "--max-num-tokens", "2048"]  # fmt: skip
_PS = ["plan", "serve", "--model", "llama3.1-8b", "--input-len", "512", "--output-len", "128", "--ttft-p99", "1",
       "--itl-p99", "0.05"]  # fmt: skip
_RL = ["rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2"]
BAD_ARGV += [
    # a negative seed reached numpy (traceback); nan / inf rates reached int() (traceback) or a capacity message
    ([*_S8, "--concurrency", "4", "--seed", "-1"], "seed: must be >= 0, got -1"),
    ([*_S8, "--qps", "nan"], "qps: must be a finite number > 0, got nan"),
    ([*_S8, "--qps", "inf"], "qps: must be a finite number > 0, got inf"),
    ([*_S8, "--disagg", "--ttft-slo", "nan"], "ttft-slo: must be a finite number > 0, got nan"),
    ([*_PS, "--qps", "nan"], "qps: must be a finite number > 0, got nan"),
    ([*_PS, "--qps", "inf"], "qps: must be a finite number > 0, got inf"),
    ([*_PS, "--qps", "1", "--seed", "-1"], "seed: must be >= 0, got -1"),
    # a nan target was accepted and searched ("no deployment meets TTFT nan s")
    ([*_PS[:-4], "--qps", "1", "--ttft-p99", "nan", "--itl-p99", "0.05"], "ttft-p99: must be a finite number > 0"),
    ([*_PS[:-4], "--qps", "1", "--ttft-p99", "1", "--itl-p99", "inf"], "itl-p99: must be a finite number > 0"),
    # a split above a pool's capacity printed finite percentiles of a queue that only grows
    ([*_S70, "--qps", "12", "--prefill-replicas", "6", "--decode-replicas", "1"],
     "qps: 12 requests/s exceeds the prefill pool's capacity, 6 replica(s) x 1.295 = 7.771 requests/s and the "
     "decode pool's capacity, 1 replica(s) x 7.195 = 7.195 requests/s"),
    ([*_S70, "--qps", "9", "--prefill-replicas", "7", "--decode-replicas", "1"],
     "qps: 9 requests/s exceeds the decode pool's capacity, 1 replica(s) x 7.195"),
    ([*_S70, "--qps", "7.1", "--prefill-replicas", "6", "--decode-replicas", "1"],
     "qps: 7.1 requests/s keeps the decode pool 98.7 % busy"),
    # --scheduler static was ignored by the split and the mean-field comparison (they batch continuously)
    ([*_S8, "--nodes", "1", "--scheduler", "static", "--disagg"],
     "scheduler: static batching is modelled for one colocated replica only"),
    # "no deployment meets SLO" where no searched GPU had the precision, or no replica held the model
    (["plan", "serve", "--model", "llama3.1-70b", "--qps", "2", "--input-len", "512", "--output-len", "128",
      "--ttft-p99", "1", "--itl-p99", "0.05", "--instance", "p4d.24xlarge", "--precision", "fp8"],
     "precision: A100-40GB (p4d.24xlarge) has no 'fp8' peak; it has bf16, fp16"),
    (["plan", "serve", "--model", "llama3.1-405b", "--qps", "2", "--input-len", "2048", "--output-len", "256",
      "--ttft-p99", "3", "--itl-p99", "0.1", "--instance", "p4d.24xlarge", "--max-nodes-per-replica", "1"],
     "the smallest replica that holds one sequence: 4 x p4d.24xlarge (tp 32 bf16); use --max-nodes-per-replica 4"),
    # --critic under GRPO (no critic; a rule-based reward has no model) was silently ignored
    (["estimate", *_RL, "--critic", "llama3.1-70b"], "critic: GRPO has no critic"),
    (["plan", *_RL, "--critic", "llama3.1-70b"], "critic: GRPO has no critic"),
]  # fmt: skip

# session 13, simulate review fixes (helper K): add rows here
BAD_FILES.update(
    {
        "trace_tiny.csv": "job_id,submit_s,num_gpus,duration_s\n1,0,8,1e-300\n",
        "trace_few_tokens.csv": "job_id,submit_s,num_gpus,tokens,model\n1,0,8,1,llama3.1-8b\n",
    }
)
BAD_ARGV += [
    # a job of 1e-300 s made numpy warn (GPU-second sums underflow); a job runs at least 1 s
    (["simulate", "--nodes", "2", "--days", "1", "--trace", "@file:trace_tiny.csv"],
     "trace_tiny.csv line 2: duration_s=1e-300 is below 1 s, the shortest job"),
    (["simulate", "--nodes", "2", "--days", "1", "--trace", "@file:trace_few_tokens.csv"],
     "tokens: job 1: 1 tokens take"),
    (["simulate", "--policy", "kueue-strict", "--priority", "multifactor"], "priority: multifactor is Slurm's"),
    (["simulate", "--policy", "kueue-lax"], "allowed: fifo, sjf, slurm-backfill, easy-backfill, kueue, kueue-strict"),
]  # fmt: skip

# session 14, lead: UltraServer part-of-one hint
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "u-p6e-gb200x72", "--nodes", "2"],
     "nearest: 18 nodes (72 GPUs); to use part of one UltraServer name its instance, --instance p6e-gb200.36xlarge"),
]  # fmt: skip
BAD_ARGV += [
    # plan serve ranks by cost; an instance without a price says how to give it one
    (["plan", "serve", "--model", "llama3.1-8b", "--instance", "p6e-gb200.36xlarge", "--qps", "5", "--input-len",
      "1000", "--output-len", "100", "--ttft-p99", "2", "--itl-p99", "0.1"],
     "instance: p6e-gb200.36xlarge has no price in the catalog and plan serve ranks deployments by cost: redefine"),
]  # fmt: skip

# session 14, docs drift review (helper A): add rows here
BAD_ARGV += []

# session 14, serve / rl fresh review (helper B): add rows here
BAD_ARGV += [
    # regression rows from the review's bad-input sweep (each already one line; kept so they stay so)
    (["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "512", "--output-len",
      "64", "--qps", "1", "--length-spread", "1.0"], "length-spread: must be in [0, 1), got 1.0"),
    (["plan", "serve", "--model", "llama3.1-8b", "--qps", "1", "--input-len", "512", "--output-len", "64",
      "--ttft-p99", "1", "--itl-p99", "0.05", "--max-nodes-per-replica", "0"],
     "max-nodes-per-replica: must be >= 1, got 0"),
    (["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "4-2"],
     "nodes: range '4-2' must start at 1 or more and end at or after its start"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--length-dist", "lognormal"],
     "length-dist: lognormal needs exactly one of --clip-ratio (with --response-cap) and --length-cv, got neither"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--minibatches", "100000"],
     "minibatches: 100000 does not divide the step's 256 prompts x 8 samples = 2048 sequences"),
]  # fmt: skip

# session 14, operations fresh review (helper C): add rows here
BAD_ARGV += [
    # options of `simulate` typed before a subcommand were dropped silently (a 64-node, 7-day compare ran)
    (["simulate", "--nodes", "4", "--days", "1", "compare", "--policy", "fifo,kueue"],
     "--nodes: given before 'compare', where it is not read; put it after: fmstack simulate compare --nodes"),
    (["simulate", "--html", "r.html", "elastic"], "--html: given before 'elastic', where it is not read; elastic has no"),
    # a Kubernetes id's namespace and name are checked before the kubeconfig is read
    (["status", "kubernetes:research/a/b"], "name 'a/b' is not a Kubernetes object name"),
    (["cancel", "pytorchjob:Research/gpt"], "namespace 'Research' is not a DNS-1123 label"),
]  # fmt: skip

# session 14, lead: the layout error names the degree that was raised
BAD_ARGV += [
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--train-tp", "1",
      "--train-cp", "3"],
     "train-cp: train_tp(1) * train_pp(1) * train_cp(3) = 3 does not divide 16 GPUs"),
]  # fmt: skip

# session 15, measure / bench / calibration fresh review (helper M)
_H100_PROFILE = (
    '{"schema_version": 1, "device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda", "catalog_gpu": "H100"}, '
    '"measured_at": "2026-11-24T00:00:00Z", "gemm_efficiency": {"bf16": {"x": [1e9, 1e12], "y": [%s, %s]}}}'
)
BAD_FILES.update(
    {
        "h100_zero_eff.json": _H100_PROFILE % (0.0, 0.7),
        "h100_negative_eff.json": _H100_PROFILE % (-0.5, -0.5),
        "h100_above_peak.json": _H100_PROFILE % (0.7, 1.5),
        "list.json": "[1, 2]",
    }
)
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--calibration",
      "@file:h100_zero_eff.json"], "field 'gemm_efficiency.bf16': Value error, y values must be > 0"),
    (["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "2048",
      "--output-len", "128", "--calibration", "@file:h100_negative_eff.json"],
     "y values must be > 0 (measured rates and fractions of a peak), got -0.5"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--calibration",
      "@file:h100_above_peak.json"], "calibration: gemm_efficiency.bf16 reaches 1.5 of H100's dense peak"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e9",
      "--calibration", "@file:h100_above_peak.json"], "reaches 1.5 of H100's dense peak"),
    (["bench", "memory", "--out", "@file:list.json"], "exists and is not a calibration profile (a calibration "
     "profile must be a JSON object, got list); it is never overwritten"),
]  # fmt: skip

# session 15, training planner fresh review (helper T)
BAD_ARGV += [
    # a model that fits nowhere says how many GPUs its weights, gradients and Adam state need at the least
    (["plan", "train", "--model", "llama3.1-405b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12"],
     "(7,305 GB: 18 B per parameter) need at least 89 H100 GPUs before activations"),
    # --objective cost skips an unpriced instance when another has a price; with none priced it is still an error
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5e.48xlarge,dgx-h100", "--gpus", "8",
      "--tokens", "1e12", "--objective", "cost"], "objective: cost needs a price for p5e.48xlarge"),
]  # fmt: skip

# session 15, router (helper R)
_RR = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "2", "--precision", "fp8",
       "--input-len", "2048", "--output-len", "256"]  # fmt: skip
BAD_ARGV += [
    # a deployment of no replicas
    ([*_RR, "--qps", "12", "--replicas", "0"], "replicas: must be >= 1, got 0"),
    # a router that is not modelled
    ([*_RR, "--qps", "12", "--replicas", "4", "--router", "foo"], "'foo' is not one of 'round-robin', 'random'"),
    (["plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len", "256",
      "--ttft-p99", "0.5", "--itl-p99", "0.05", "--router", "least-load"], "'least-load' is not one of"),
    # --replicas spreads an open-loop rate: not a closed loop's clients, not a split's pools
    ([*_RR, "--concurrency", "8", "--replicas", "2"], "replicas: --replicas N spreads an open-loop rate"),
    ([*_RR, "--nodes", "2", "--qps", "12", "--prefill-replicas", "2", "--decode-replicas", "1", "--replicas", "4"],
     "replicas: --replicas is for colocated replicas"),
]  # fmt: skip

# session 16, routers: least-loaded and cache-aware over a joint replica simulation (helper K)
_PQ = [*_RR, "--qps", "8", "--replicas", "4"]
_PLAN = ["plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len", "256",
         "--ttft-p99", "0.5", "--itl-p99", "0.05"]  # fmt: skip
BAD_ARGV += [
    # the scalar hit rate and the simulated one exclude each other
    ([*_PQ, "--prefix-groups", "16", "--prefix-len", "1024", "--prefix-hit-rate", "0.5"],
     "prefix-groups: --prefix-groups simulates the hit rate that --prefix-hit-rate gives"),
    # a workload needs its prefix length, below the prompt's
    ([*_PQ, "--prefix-groups", "16"], "prefix-len: --prefix-groups needs --prefix-len"),
    ([*_PQ, "--prefix-groups", "16", "--prefix-len", "2048"], "prefix-len: must be below --input-len (2048)"),
    ([*_PQ, "--prefix-groups", "16", "--prefix-len", "0"], "prefix-len: must be >= 1"),
    ([*_PQ, "--prefix-groups", "0", "--prefix-len", "512"], "prefix-groups: must be >= 1, got 0"),
    ([*_PQ, "--prefix-groups", "4", "--prefix-len", "512", "--prefix-zipf", "-1"], "prefix-zipf: must be a finite"),
    ([*_PQ, "--prefix-groups", "4", "--prefix-len", "512", "--prefix-zipf", "nan"], "prefix-zipf: must be a finite"),
    # the workload's own flags without it
    ([*_PQ, "--prefix-len", "512"], "prefix-len: --prefix-len describes a --prefix-groups workload"),
    ([*_PQ, "--prefix-zipf", "1.1"], "prefix-zipf: --prefix-zipf describes a --prefix-groups workload"),
    # simulated at an open-loop rate, colocated, by simulation
    ([*_RR, "--concurrency", "8", "--prefix-groups", "4", "--prefix-len", "512"], "prefix-groups: a shared-prefix "
     "workload is simulated at an open-loop rate"),
    ([*_PQ, "--prefix-groups", "4", "--prefix-len", "512", "--no-simulate"], "prefix-groups: a shared-prefix "
     "workload is simulated for colocated replicas: drop --no-simulate"),
    # plan serve: the same checks
    ([*_PLAN, "--prefix-groups", "8"], "prefix-len: --prefix-groups needs --prefix-len"),
    ([*_PLAN, "--prefix-groups", "8", "--prefix-len", "4096"], "prefix-len: must be below --input-len (2048)"),
]  # fmt: skip

# session 16, known gaps: plan train rows, checkpoint RNG, trace time limits, estimate_cmd split (helper T)
# a trace's time_limit_s of 0 is no limit (Slurm --time=0); a negative one is still bad input
BAD_FILES["sim_trace_negative_limit.csv"] = "job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,600,-60\n"
BAD_ARGV += [
    (["simulate", "--nodes", "1", "--days", "1", "--trace", "@file:sim_trace_negative_limit.csv"],
     "sim_trace_negative_limit.csv line 2: time_limit_s='-60' must be a finite number >= 0"),
]  # fmt: skip

# session 16, RL fresh review (helper R)
_RL8 = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2"]
BAD_ARGV += [
    # the context check names the response flag that went over (was prompt-len, the serving field, for both)
    ([*_RL8, "--response-len", "200000"], "response-len: prompt-len(1024) + response-len(200000) = 201024 tokens"),
    ([*_RL8, "--response-cap", "200000"], "response-cap: prompt-len(1024) + response-cap(200000) = 201024 tokens"),
    (["plan", "rl", *_RL8[2:], "--response-cap", "200000"], "response-cap: prompt-len(1024) + response-cap(200000)"),
    # the training model's errors name estimate rl's flags (were ep / tp, estimate train's)
    ([*_RL8, "--train-ep", "2"], "train-ep: llama3.1-8b is dense; train_ep(2) must be 1"),
    ([*_RL8, "--model", "qwen3-30b-a3b", "--train-ep", "3"], "train-ep: train_ep(3) does not divide num_experts(128)"),
    ([*_RL8, "--nodes", "3", "--train-tp", "3"], "train-tp: num_heads(32) of llama3.1-8b is not divisible by train_tp(3)"),
    # a batch that does not split over the trainer's data-parallel ranks (veRL refuses it; was padded silently)
    ([*_RL8, "--prompts", "3", "--train-tp", "1"], "prompts: the step's 3 prompts x 8 samples = 24 sequences do not split"),
    ([*_RL8, "--prompts", "4", "--minibatches", "4", "--train-tp", "1"], "minibatches: 32 sequences / 4 minibatches = 8"),
    # an uncapped log-normal whose mean lives in draws too rare for the step (was: a rollout of ~3-token responses,
    # faster than its own steady rate, priced as 1024-token ones)
    ([*_RL8, "--length-dist", "lognormal", "--length-cv", "1e9"], "length-cv: the step's 2048 drawn responses average"),
]  # fmt: skip

# session 16, scale / catalog / validate fresh review (helper S)
_S8 = ["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tokens", "1e12"]
BAD_ARGV += [
    # a nodes sweep from a GPU count that is not whole nodes: the default node counts were floored silently
    # (63 GPUs swept 7, 14, 28, 56 nodes; 4 GPUs one 8-GPU node), as plan train refuses the same count
    ([*_S8, "--gpus", "63"], "gpus: 63 is not a multiple of 8 GPUs per p5.48xlarge node; nearest: 56 (7 nodes) or 64"),
    ([*_S8, "--gpus", "4"], "gpus: 4 is not a multiple of 8 GPUs per p5.48xlarge node; nearest: 8 (1 node)"),
    ([*_S8, "--gpus", "64,100"], "gpus: 100 is not a multiple of 8 GPUs per p5.48xlarge node"),
    # a sequence length of 0 said "no value of --axis seq-len could be planned; 0: skipped: must be > 0, got 0"
    ([*_S8, "--gpus", "64", "--axis", "seq-len", "--values", "4096,0"],
     "values: sequence length '0' must be a positive number of tokens"),
    ([*_S8, "--gpus", "64", "--axis", "seq-len", "--values", "-8"], "values: sequence length '-8' must be a positive"),
]  # fmt: skip

# session 16, optimizer-state and parameter storage layouts (helper O)
_O8 = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1"]
_OP = ["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12"]
BAD_ARGV += [
    ([*_O8, "--optimizer-state", "fp16"], "Invalid value for '--optimizer-state': 'fp16' is not one of 'fp32', 'bf16'"),
    ([*_O8, "--master-weights", "half"], "'half' is not one of 'fp32', 'remainder', 'none'"),
    # FP8 parameters without FP8 compute: there is no FP8 weight to keep
    ([*_O8, "--fp8-param-gather"], "fp8-param-gather: keeps the weights as FP8 parameters: it needs --precision fp8, got bf16"),
    # the 16-bit remainder completes a bf16 weight; an fp16 weight is not the high half of an fp32 one
    ([*_O8, "--precision", "fp16", "--master-weights", "remainder"], "master-weights: remainder stores the low 16 bits"),
    # FP8 weights cannot carry the update themselves (NeMo forces store_params=True with fp8_params)
    ([*_O8, "--precision", "fp8", "--fp8-param-gather", "--master-weights", "none"],
     "master-weights: FP8 parameters (--fp8-param-gather) need fp32 master weights to update; got none"),
    ([*_O8, "--grad-shard-buffer", "--sharding", "fsdp"], "grad-shard-buffer: adds a reduce-scattered gradient shard next"),
    ([*_OP, "--fp8-param-gather"], "fp8-param-gather: keeps the weights as FP8 parameters: it needs fp8 among --precision"),
    ([*_OP, "--precision", "bf16,fp16", "--master-weights", "remainder"], "master-weights: remainder stores the low 16"),
    ([*_OP, "--optimizer-state", "int8"], "Invalid value for '--optimizer-state': 'int8' is not one of 'fp32', 'bf16'"),
]  # fmt: skip

# session 17, Dynamo KV router (helper A)
_KV = [*_PQ, "--router", "kv"]
BAD_ARGV += [
    ([*_KV, "--kv-overlap-weight", "-1"], "kv-overlap-weight: must be a finite number >= 0, got -1.0"),
    ([*_KV, "--kv-overlap-weight", "inf"], "kv-overlap-weight: must be a finite number >= 0, got inf"),
    ([*_KV, "--router-temperature", "-0.5"], "router-temperature: must be a finite number >= 0, got -0.5"),
    ([*_KV, "--router-temperature", "nan"], "router-temperature: must be a finite number >= 0, got nan"),
    ([*_KV, "--kv-block-size", "1"], "kv-block-size: must be >= 2 tokens (Dynamo asserts block_size > 1), got 1"),
    # the KV router's settings with another router (round-robin by default)
    ([*_PQ, "--kv-overlap-weight", "2"], "kv-overlap-weight: --kv-overlap-weight sets the KV router: give --router kv "
     "(got --router round-robin)"),
    ([*_PQ, "--router", "cache-aware", "--router-temperature", "0.5"], "router-temperature: --router-temperature sets "
     "the KV router: give --router kv (got --router cache-aware)"),
    ([*_PQ, "--kv-block-size", "64"], "kv-block-size: --kv-block-size sets the KV router: give --router kv"),
    ([*_PLAN, "--kv-overlap-weight", "0.5"], "kv-overlap-weight: --kv-overlap-weight sets the KV router: give --router "
     "kv (got --router round-robin)"),
    ([*_PLAN, "--router", "kv", "--router-temperature", "-1"], "router-temperature: must be a finite number >= 0"),
]  # fmt: skip


# session 17, optimizer layouts in scale, RL and the optimizer step (helper B)
_BS = ["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12",
       "--values", "1,2"]  # fmt: skip
_BR = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "64", "--samples", "8"]
_BP = ["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--prompts", "64"]
BAD_ARGV += [
    # scale re-plans every point with plan train's layout checks, before the sweep
    ([*_BS, "--fp8-param-gather"], "fp8-param-gather: keeps the weights as FP8 parameters: it needs fp8 among --precision"),
    ([*_BS, "--precision", "fp8", "--fp8-param-gather", "--master-weights", "none"],
     "master-weights: FP8 parameters (--fp8-param-gather) need fp32 master weights to update; got none"),
    ([*_BS, "--precision", "bf16,fp16", "--master-weights", "remainder"], "master-weights: remainder stores the low 16"),
    ([*_BS, "--optimizer-state", "int8"], "Invalid value for '--optimizer-state': 'int8' is not one of 'fp32', 'bf16'"),
    # the RL trainer computes in bf16: no FP8 parameters to keep
    ([*_BR, "--fp8-param-gather"], "fp8-param-gather: keeps the weights as FP8 parameters, which needs FP8 training"),
    ([*_BP, "--fp8-param-gather"], "fp8-param-gather: keeps the weights as FP8 parameters, which needs FP8 training"),
    # the Apex gradient shard sits beside zero1's full buffer; FSDP (the default at train tp = pp = 1) shards it
    ([*_BR, "--train-tp", "1", "--grad-shard-buffer"],
     "grad-shard-buffer: adds a gradient shard next to zero1's full gradient buffer; the trained models use fsdp (the "
     "default at train tp = pp = 1): give --train-sharding zero1"),
    ([*_BR, "--train-sharding", "zero3", "--grad-shard-buffer"], "the trained models use zero3 (--train-sharding zero3)"),
    ([*_BR, "--master-weights", "half"], "'half' is not one of 'fp32', 'remainder', 'none'"),
]  # fmt: skip


# session 17, prefix cache: shared running blocks, attention DP, disaggregated prefill (helper D)
# (session 16's row "a shared-prefix workload is not simulated under attention DP" went: each rank now caches)
BAD_ARGV += [
    (["plan", "serve", "--model", "qwen3-235b-a22b", "--qps", "4", "--input-len", "1024", "--output-len", "200",
      "--ttft-p99", "1", "--itl-p99", "0.1", "--prefix-groups", "8", "--prefix-len", "1024"],
     "prefix-len: must be below --input-len (1024), got 1024"),
]  # fmt: skip


# session 17, fleet twin: GPU faults by Xid class, preemption-aware checkpoint interval (helper E)
_SIM_E = ["simulate", "--nodes", "4", "--days", "1", "--jobs", "10"]
BAD_ARGV += [
    ([*_SIM_E, "--ckpt-interval-rate", "bogus"],
     "ckpt_interval_rate: unknown rate 'bogus'; allowed: failures, failures+preemptions"),
    ([*_SIM_E, "--ckpt-interval-rate", "failures+preemptions", "--ckpt-interval", "30"],
     "ckpt_interval_rate: failures+preemptions sets young's or daly's interval; --ckpt-interval 30 is fixed"),
    (["simulate", "compare", "--policy", "fifo,kueue", "--nodes", "4", "--days", "1", "--jobs", "10",
      "--ckpt-interval-rate", "preemptions"], "ckpt_interval_rate: unknown rate 'preemptions'"),
]  # fmt: skip


# session 17, memory model against published peak memory (helper F)
BAD_ARGV += [
    (["validate", "--only", "memory"], "Invalid value for '--only': 'memory' is not one of"),
]  # fmt: skip


# session 17, FSDP2 fp32-parameter layout and gradient dtype (helper G)
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--master-weights",
      "fp32-params"], "master-weights: fp32-params is FSDP's layout (sharded fp32 parameters, gathered in bf16): it needs "
     "--sharding fsdp or hsdp, got zero1"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--sharding", "fsdp",
      "--master-weights", "fp32-params", "--grad-dtype", "bf16"],
     "grad-dtype: fp32-params keeps gradients in the fp32 parameters' dtype"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--sharding", "fsdp",
      "--master-weights", "fp32-params", "--precision", "fp8"], "master-weights: fp32-params gathers the fp32 parameters"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--grad-dtype", "fp16"],
     "Invalid value for '--grad-dtype'"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--train-tp", "1",
      "--grad-dtype", "bf16"], "grad-dtype: veRL's FSDP backend (fsdp) keeps the gradients in the fp32 parameters' dtype"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--master-weights",
      "fp32-params"], "master-weights: fp32-params is FSDP's layout"),
]  # fmt: skip


# session 17, fleet twin: health history windows (helper I)
BAD_ARGV += [
    (["simulate", "--nodes", "2", "--days", "1", "--jobs", "5", "--health-window-h", "0"],
     "health_window_h: must be > 0 hours (inf: the whole run), got 0.0"),
    (["simulate", "--nodes", "2", "--days", "1", "--jobs", "5", "--health-window-h", "-24"],
     "health_window_h: must be > 0 hours (inf: the whole run), got -24.0"),
    (["simulate", "--nodes", "2", "--days", "1", "--jobs", "5", "--health-window-h", "nan"],
     "health_window_h: must be > 0 hours (inf: the whole run), got nan"),
    (["simulate", "--health-window-h", "a day"], "Invalid value for '--health-window-h'"),
]  # fmt: skip


# session 17, prefix cache in the prefill pool of a disaggregated split (helper J)
# (helper D's row "a shared-prefix workload is simulated for colocated replicas" for a split went: the prefill
# replicas now cache prefixes, tests/cli/test_serve_disagg_prefix.py)
BAD_ARGV += [
    ([*_RR, "--nodes", "2", "--qps", "4", "--disagg", "--prefix-groups", "8", "--prefix-len", "512"],
     "prefix-groups: --disagg's mean-field comparison prices whole prompts; drop --disagg"),
    (["estimate", "serve", "--model", "qwen3-235b-a22b", "--instance", "p5.48xlarge", "--tp", "8", "--ep", "8",
      "--attention-dp", "--precision", "fp8", "--input-len", "2048", "--output-len", "256", "--nodes", "2", "--qps", "2",
      "--prefill-replicas", "1", "--decode-replicas", "1", "--prefix-groups", "8", "--prefix-len", "512"],
     "prefix-groups: a shared-prefix workload is not simulated in an attention-DP prefill pool"),
]  # fmt: skip


# session 18, speculative decoding (helper S)
_SPEC = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "512",
         "--output-len", "128", "--concurrency", "1", "--no-simulate"]  # fmt: skip
BAD_ARGV += [
    ([*_SPEC, "--speculative", "eagle", "--spec-acceptance", "0.8", "--spec-tokens", "0"],
     "spec-tokens: must be in 1..16, got 0"),
    ([*_SPEC, "--speculative", "eagle", "--spec-acceptance", "0.8", "--spec-tokens", "17"],
     "spec-tokens: must be in 1..16, got 17"),
    ([*_SPEC, "--speculative", "eagle", "--spec-acceptance", "1.5"], "spec-acceptance: must be in (0, 1], got 1.5"),
    ([*_SPEC, "--speculative", "eagle", "--spec-acceptance", "0"], "spec-acceptance: must be in (0, 1], got 0.0"),
    ([*_SPEC, "--speculative", "eagle", "--spec-acceptance", "nan"], "spec-acceptance: must be in (0, 1], got nan"),
    ([*_SPEC, "--speculative", "eagle", "--spec-acceptance", "high"], "spec-acceptance: 'high': give a number"),
    ([*_SPEC, "--speculative", "eagle", "--spec-tokens", "3", "--spec-acceptance", "0.9,0.8"],
     "spec-acceptance: 2 values for 3 draft tokens"),
    ([*_SPEC, "--speculative", "eagle"], "spec-acceptance: eagle has no published default acceptance"),
    ([*_SPEC, "--speculative", "mtp"], "speculative: mtp needs multi-token-prediction modules; llama3.1-8b has none"),
    ([*_SPEC, "--speculative", "draft", "--spec-acceptance", "0.7"], "draft-model: --speculative draft needs"),
    ([*_SPEC, "--speculative", "draft", "--spec-acceptance", "0.7", "--draft-model", "no-such-model"],
     "no-such-model"),
    ([*_SPEC, "--speculative", "draft", "--spec-acceptance", "0.7", "--draft-model", "llama2-7b"],
     "draft-model: llama2-7b's vocabulary (32000) differs from llama3.1-8b's"),
    ([*_SPEC, "--speculative", "ngram", "--spec-acceptance", "0.7", "--draft-model", "llama3-8b"],
     "draft-model: only with --speculative draft, not ngram"),
    ([*_SPEC, "--spec-tokens", "3"], "spec-tokens: --spec-tokens needs --speculative"),
    ([*_SPEC, "--speculative", "warp"], "Invalid value for '--speculative'"),
]  # fmt: skip


# session 18, multi-turn sessions (helper M)
_MT = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp8",
       "--input-len", "512", "--output-len", "256"]  # fmt: skip
BAD_ARGV += [
    ([*_MT, "--qps", "8", "--turns", "0"], "turns: must be >= 1, got 0"),
    ([*_MT, "--qps", "8", "--turns", "-3"], "turns: must be >= 1, got -3"),
    ([*_MT, "--qps", "8", "--turns", "4", "--think-time-s", "-1"],
     "think-time-s: must be a finite number of seconds >= 0, got -1.0"),
    ([*_MT, "--qps", "8", "--turns", "4", "--think-time-s", "nan"],
     "think-time-s: must be a finite number of seconds >= 0, got nan"),
    ([*_MT, "--qps", "8", "--turns", "4", "--think-time-s", "inf"],
     "think-time-s: must be a finite number of seconds >= 0, got inf"),
    ([*_MT, "--qps", "8", "--think-time-s", "5"], "think-time-s: --think-time-s is the pause between a session's"),
    ([*_MT, "--qps", "8", "--replicas", "4", "--router", "session"],
     "router: session affinity pins a session's turns: give --turns > 1"),
    # (session 19, lead: --no-simulate with --turns prints the analytic mean turn now; its row left this block)
    ([*_MT, "--qps", "8", "--turns", "4", "--disagg"],
     "turns: a multi-turn workload is simulated for colocated replicas: drop --disagg"),
    # (session 19, helper F: a split simulates sessions now, inference_sim_disagg_session; its row left this block)
    ([*_MT, "--concurrency", "8", "--turns", "4", "--scheduler", "static"],
     "turns: a multi-turn workload is simulated for colocated replicas: drop --scheduler static"),
    ([*_MT, "--qps", "8", "--turns", "4", "--prefix-hit-rate", "0.5"],
     "turns: a multi-turn workload is simulated for colocated replicas: drop --prefix-hit-rate"),
    # the whole conversation beyond Llama 3.1's 131,072-token context: refused, not truncated
    ([*_MT, "--qps", "8", "--turns", "200"],
     "turns: 200 turns x (512 + 256) tokens = 153600 exceed the model's context of 131072 tokens"),
    ([*_MT, "--qps", "8", "--turns", "two"], "Invalid value for '--turns'"),
]  # fmt: skip


# session 18, lead: FSDP's reduce_dtype
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--reduce-dtype", "bf16"],
     "reduce-dtype: is FSDP's reduce_dtype under --master-weights fp32-params (got fp32)"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--tokens", "1e11",
      "--reduce-dtype", "bf16"], "reduce-dtype: is FSDP's reduce_dtype under --master-weights fp32-params (got fp32)"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--reduce-dtype", "bf16"],
     "reduce-dtype: is FSDP's reduce_dtype under fp32-params (veRL's FSDP backend); the trained models use veRL's "
     "Megatron backend"),
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--sharding", "fsdp",
      "--master-weights", "fp32-params", "--reduce-dtype", "fp16"], "Invalid value for '--reduce-dtype'"),
]  # fmt: skip


# session 18, speculative decoding in plan serve (helper T)
_PSPEC = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "2", "--input-len", "1024", "--output-len", "256",
          "--ttft-p99", "1", "--itl-p99", "0.02", "--instance", "p5.48xlarge"]  # fmt: skip
BAD_ARGV += [
    ([*_PSPEC, "--speculative", "auto"], "speculative: auto compares each candidate with and without MTP; llama3.1-8b "
     "has no MTP modules"),
    ([*_PSPEC, "--speculative", "eagle"], "spec-acceptance: eagle has no published default acceptance"),
    ([*_PSPEC, "--spec-acceptance", "0.8"], "spec-acceptance: --spec-acceptance needs --speculative"),
    ([*_PSPEC, "--speculative", "ngram", "--spec-acceptance", "0.8", "--spec-tokens", "0"],
     "spec-tokens: must be in 1..16, got 0"),
    ([*_PSPEC, "--speculative", "ngram", "--spec-acceptance", "1.2"], "spec-acceptance: must be in (0, 1], got 1.2"),
    ([*_PSPEC, "--speculative", "draft", "--spec-acceptance", "0.7"], "draft-model: --speculative draft needs"),
    ([*_PSPEC, "--speculative", "draft", "--spec-acceptance", "0.7", "--draft-model", "nope-7b"],
     "model: unknown model 'nope-7b'"),
    ([*_PSPEC, "--speculative", "mtp"], "speculative: mtp needs multi-token-prediction modules; llama3.1-8b has none"),
    ([*_PSPEC, "--speculative", "warp"], "Invalid value for '--speculative'"),
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--tp", "8",
      "--speculative", "auto"], "Invalid value for '--speculative'"),
]  # fmt: skip

# session 19, lead: a NaN / infinite length spread crashed the closed-loop bound before the simulation checked it
_SPREAD = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tp", "1", "--input-len",
           "512", "--output-len", "64", "--concurrency", "4", "--length-spread"]  # fmt: skip
BAD_ARGV += [
    ([*_SPREAD, "nan"], "length-spread: must be in [0, 1), got nan"),
    ([*_SPREAD, "inf"], "length-spread: must be in [0, 1), got inf"),
]  # fmt: skip

# session 19, speculative decoding in disaggregated serving (helper D)
_DSPEC = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", "512",
          "--output-len", "128", "--precision", "fp8"]  # fmt: skip
_SPLIT = ["--qps", "2", "--prefill-replicas", "1", "--decode-replicas", "1"]
BAD_ARGV += [
    ([*_DSPEC, "--disagg", "--speculative", "ngram"], "spec-acceptance: ngram has no published default acceptance"),
    ([*_DSPEC, *_SPLIT, "--speculative", "mtp"],
     "speculative: mtp needs multi-token-prediction modules; llama3.1-8b has none"),
    ([*_DSPEC, *_SPLIT, "--speculative", "ngram", "--spec-acceptance", "1.5"],
     "spec-acceptance: must be in (0, 1], got 1.5"),
    ([*_DSPEC, *_SPLIT, "--speculative", "eagle", "--spec-acceptance", "0.7", "--draft-model", "llama3-8b"],
     "draft-model: only with --speculative draft, not eagle"),
]  # fmt: skip

# session 19, multi-turn sessions in plan serve (helper E)
_PSESS = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "2", "--input-len", "512", "--output-len", "128",
          "--ttft-p99", "1", "--itl-p99", "0.05", "--instance", "p5.48xlarge"]  # fmt: skip
BAD_ARGV += [
    ([*_PSESS, "--turns", "0"], "turns: must be >= 1, got 0"),
    ([*_PSESS, "--turns", "3", "--think-time-s", "-1"], "think-time-s: must be a finite number of seconds >= 0, got -1"),
    ([*_PSESS, "--turns", "3", "--think-time-s", "nan"], "think-time-s: must be a finite number of seconds >= 0"),
    ([*_PSESS, "--think-time-s", "5"], "think-time-s: --think-time-s is the pause between a session's turns"),
    ([*_PSESS, "--router", "session"], "router: session affinity pins a session's turns: give --turns > 1"),
    ([*_PSESS, "--turns", "300"], "turns: 300 turns x (512 + 128) tokens = 192000 exceed the model's context"),
    ([*_PSESS, "--turns", "two"], "Invalid value for '--turns'"),
]  # fmt: skip

# session 19, multi-turn sessions in disaggregated serving (helper F)
_DSESS = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp8",
          "--input-len", "512", "--output-len", "256", "--qps", "4", "--prefill-replicas", "1", "--decode-replicas",
          "1", "--turns", "3"]  # fmt: skip
BAD_ARGV += [
    (["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--nodes", "2", "--tp", "8",
      "--ep", "8", "--precision", "fp8", "--input-len", "2048", "--output-len", "128", "--qps", "2",
      "--prefill-replicas", "1", "--decode-replicas", "1", "--attention-dp", "--turns", "2"],
     "attention-dp: sessions in a split are simulated without attention DP in either pool"),
    ([*_DSESS, "--disagg"], "turns: a multi-turn workload is simulated for colocated replicas: drop --disagg"),
    ([*_DSESS, "--think-time-s", "-2"], "think-time-s: must be a finite number of seconds >= 0, got -2.0"),
    ([*_DSESS, "--router", "session", "--turns", "1"], "router: session affinity pins a session's turns"),
]  # fmt: skip

# session 19, analytic session pricing in estimate serve (helper G)
BAD_ARGV += [
    # 45 req/s: one turn of 512 new tokens fits (60.6 req/s), the sessions' mean turn (1,664 tokens, 69 % cached) not
    ([*_MT, "--qps", "45", "--turns", "4"],
     "qps: 45 requests/s exceeds one replica's capacity, 39.6 requests/s at its limit of 516 sequences; add replicas "
     "or GPUs (the sessions' mean turn: a 1664-token prompt, 69.2% of it cached history)"),
]  # fmt: skip

# session 19, plan serve splits with multi-turn sessions (helper H)
BAD_ARGV += []  # fmt: skip

# session 19, host-memory KV offload tier for prefix / session caches (helper J)
_OFF = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "4", "--precision", "fp8",
        "--input-len", "1024", "--output-len", "256", "--qps", "2"]  # fmt: skip
BAD_ARGV += [
    ([*_OFF, "--turns", "4", "--think-time-s", "5", "--kv-offload-gib", "-1"], "kv-offload-gib"),
    ([*_OFF, "--turns", "4", "--think-time-s", "5", "--kv-offload-gib", "nan"], "kv-offload-gib"),
    ([*_OFF, "--turns", "4", "--think-time-s", "5", "--kv-offload-gib", "1025"], "kv-offload-gib"),
    ([*_OFF, "--kv-offload-gib", "64"], "kv-offload-gib"),
    ([*_OFF, "--turns", "4", "--think-time-s", "5", "--kv-offload-gib", "64", "--no-simulate"], "kv-offload-gib"),
    ([*_OFF, "--kv-offload-gib", "64", "--disagg"],
     "kv-offload-gib: is simulated, not priced by --disagg's mean field"),  # session 20: a split simulates it
]  # fmt: skip

# session 20, lead: a request rate no one deployment serves is refused before its p99 checks (took minutes and GBs)
BAD_ARGV += [
    (["plan", "serve", "--model", "llama3.1-8b", "--qps", "1e8", "--input-len", "1024", "--output-len", "256",
      "--ttft-p99", "2", "--itl-p99", "0.05"],
     "qps: 1e+08 requests/s needs at least 1,394,984 GPUs (the fewest of any deployment screened), more than the "
     "1,048,576 one plan sizes"),
    (["plan", "serve", "--model", "llama3.1-8b", "--qps", "1e30", "--input-len", "1024", "--output-len", "256",
      "--ttft-p99", "2", "--itl-p99", "0.05"], "qps: 1e+30 requests/s needs at least"),
]  # fmt: skip

# session 20, lead: a split's sessions with a shared system prefix (simulated since session 20) check its length
BAD_ARGV += [
    ([*_DSESS, "--prefix-groups", "4", "--prefix-len", "4096"], "prefix-len: must be below --input-len"),
]  # fmt: skip

# session 20, lead: a training run's tokens are bounded (1e30 printed ~1e20 days)
BAD_ARGV += [
    (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--tokens", "1e30"],
     "tokens: 1e+30 tokens; allowed: at most 1e+16"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--tokens", "1e17"],
     "tokens: 1e+17 tokens; allowed: at most 1e+16"),
]  # fmt: skip

# session 20, lead: a JobSpec's nodes at most 2^20 (the cluster limit; 10^12 nodes were rendered into sbatch)
BAD_FILES.update({"s20_job_nodes.yaml": "name: j\ncommand: ['true']\nimage: x:1\nnodes: 1000000000000\n"})
BAD_ARGV += [
    (["launch", "@file:s20_job_nodes.yaml", "--on", "slurm", "--dry-run"],
     "field 'nodes': Input should be less than or equal to 1048576"),
]  # fmt: skip

# session 20, fuzzing the commands other than serve (helper A): add rows here
_GPU_S20A = ("kind: gpu\nentries:\n  - name: XG\n    architecture: x\n    bf16_dense_tflops: 100\n    fp16_dense_tflops: 100\n"
             "    hbm_gb: 80\n    hbm_type: x\n    hbm_bw_tbps: 3\n    tdp_w: 700\n")  # fmt: skip
_CAL_S20A = ('{"device": {"name": "NVIDIA H100 80GB HBM3", "kind": "cuda", "catalog_gpu": "H100"%s}, '
             '"measured_at": "2026-11-25T00:00:00", "gemm_tflops": {"bf16": {"x": %s, "y": [100, 500]}}}')  # fmt: skip
BAD_FILES.update(
    {
        # YAML .inf (and 1e400, read as inf) passed `gt=0`: a GPU of inf TFLOP/s, an instance of inf GB/s
        "s20a_gpu_inf.yaml": _GPU_S20A.replace("bf16_dense_tflops: 100", "bf16_dense_tflops: .inf"),
        "s20a_gpu_huge.yaml": _GPU_S20A.replace("hbm_gb: 80", "hbm_gb: 1e400"),
        "s20a_inst_inf.yaml": "kind: instance\nentries:\n  - name: i6\n    gpu: H100\n    num_gpus: 8\n"
        "    gpu_memory_gb: 640\n    vcpus: 1\n    host_memory_gib: 1\n    nvlink_domain_gpus: 8\n    network: efa-v2\n"
        "    network_gbit_per_s: .inf\n",
        # profile curves with NaN / Infinity sizes and device peaks of NaN, -5, Infinity were read as given
        "s20a_cal_x_nan.json": _CAL_S20A % ("", "[NaN, 1e12]"),
        "s20a_cal_x_inf.json": _CAL_S20A % ("", "[1e9, Infinity]"),
        "s20a_cal_peak_nan.json": _CAL_S20A % (', "peak_tflops": {"bf16": NaN}', "[1e9, 1e12]"),
        "s20a_cal_peak_neg.json": _CAL_S20A % (', "peak_tflops": {"bf16": -5}', "[1e9, 1e12]"),
        "s20a_cal_peak_inf.json": _CAL_S20A % (', "peak_memory_bw_gbps": Infinity', "[1e9, 1e12]"),
    }
)
_TRAIN_S20A = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1"]
BAD_ARGV += [
    (["catalog", "list", "--catalog", "@dir:s20a_gpu_inf.yaml"],
     "entry 'XG': field 'bf16_dense_tflops': Input should be a finite number"),
    (["catalog", "show", "gpu", "XG", "--catalog", "@dir:s20a_gpu_huge.yaml"],
     "entry 'XG': field 'hbm_gb': Input should be a finite number"),
    (["catalog", "list", "instance", "--catalog", "@dir:s20a_inst_inf.yaml"],
     "entry 'i6': field 'network_bw_gbps': Input should be a finite number"),
    ([*_TRAIN_S20A, "--calibration", "@file:s20a_cal_x_nan.json"],
     "field 'gemm_tflops.bf16': Value error, x values must be finite and > 0"),
    (["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--tokens", "1e10",
      "--calibration", "@file:s20a_cal_x_inf.json"], "x values must be finite and > 0"),
    # before: estimate train and estimate rl ZeroDivisionError (an infinite HBM peak -> efficiency 0)
    ([*_TRAIN_S20A, "--calibration", "@file:s20a_cal_peak_inf.json"],
     "field 'device.peak_memory_bw_gbps': Input should be a finite number"),
    (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--calibration",
      "@file:s20a_cal_peak_inf.json"], "field 'device.peak_memory_bw_gbps': Input should be a finite number"),
    ([*_TRAIN_S20A, "--calibration", "@file:s20a_cal_peak_nan.json"],
     "field 'device.peak_tflops.bf16': Input should be a finite number"),
    ([*_TRAIN_S20A, "--calibration", "@file:s20a_cal_peak_neg.json"],
     "field 'device.peak_tflops.bf16': Input should be greater than 0"),
    # before: `local:..` / `local:.` named the state root's parent / the root itself (FileNotFoundError on its pid),
    # a name longer than NAME_MAX raised OSError ENAMETOOLONG
    (["status", "local:.."], "ID: local:.. not found under"),
    (["cancel", "local:."], "ID: local:. not found under"),
    (["status", "local:" + "a" * 300], "ID: local:" + "a" * 80 + "... not found under"),
]  # fmt: skip

# bench upper bounds (fmstack/bench/limits.py): before, these ran without end (trials, procs, ranks, max-bytes) or
# died in torch.set_num_threads with a ValueError (threads)
_HUGE_S20A = "99999999999999999999"
BAD_ARGV += [
    (["bench", "gemm", "--trials", _HUGE_S20A], f"trials: {_HUGE_S20A}; allowed: 1 to 10,000 timed batches per point"),
    (["bench", "gemm", "--threads", _HUGE_S20A], f"threads: {_HUGE_S20A}; allowed: at most 1,024 on one machine"),
    (["bench", "memory", "--procs", _HUGE_S20A], f"procs: {_HUGE_S20A}; allowed: at most 1,024 on one machine"),
    (["bench", "collectives", "--ranks", "5000"], "ranks: 5000; allowed: at most 1,024 on one machine"),
    (["bench", "memory", "--min-time", "1e30"], "min-time: 1e+30; allowed: a finite number > 0 and <= 3600 seconds"),
    (["bench", "memory", "--max-bytes", _HUGE_S20A],
     "max-bytes: 99,999,999,999,999,999,999 bytes x 3 arrays (triad) x procs(1) exceed this machine's"),
    (["bench", "collectives", "--max-bytes", _HUGE_S20A],
     "max-bytes: 99,999,999,999,999,999,999 bytes x 2 buffers x ranks(2) exceed this machine's"),
]  # fmt: skip

# before: RecursionError tracebacks from the JSON / YAML / TOML parsers on 5,000-deep nesting; a --path URL whose
# fsspec filesystem needs a host (ftp://) raised TypeError; --dashboards under a file raised NotADirectoryError
_DEEP_S20A = "[" * 5000 + "]" * 5000
BAD_FILES.update(
    {
        "s20a_deep.json": _DEEP_S20A,
        "s20a_deep.yaml": "a: " + _DEEP_S20A + "\n",
        "s20a_deep_job.yaml": "a: " + _DEEP_S20A + "\n",
        "s20a_deep_job.toml": "a = " + _DEEP_S20A + "\n",
    }
)
BAD_ARGV += [
    (["health", "--signals", "@file:s20a_deep.json"], "s20a_deep.json nests JSON arrays or objects too deeply"),
    (["health", "--alerts", "@file:s20a_deep.json"], "s20a_deep.json nests JSON arrays or objects too deeply to read"),
    ([*_TRAIN_S20A, "--calibration", "@file:s20a_deep.json"],
     "s20a_deep.json nests JSON arrays or objects too deeply to read"),
    (["catalog", "list", "--catalog", "@dir:s20a_deep.yaml"], "s20a_deep.yaml: nests YAML lists or mappings too deeply"),
    (["launch", "@file:s20a_deep_job.yaml", "--on", "slurm", "--dry-run"], "nests lists or mappings too deeply to read"),
    (["launch", "@file:s20a_deep_job.toml", "--on", "local", "--dry-run"], "nests lists or mappings too deeply to read"),
    (["bench", "storage", "--path", "ftp://x"], "path: no filesystem for ftp://"),
    (["exporter", "--dashboards", "/dev/null/grafana"], "--dashboards: cannot write in /dev/null/grafana: Not a directory"),
]  # fmt: skip

# before: click's FloatRange let NaN through (NaN fails no comparison): --app-max-age nan etc. were accepted, exit 0
BAD_ARGV += [
    (["exporter", "--backend", "fake", "--once", "--no-efa", "--app-max-age", "nan"],
     "Invalid value for '--app-max-age': 'nan' is not a number; allowed: 1<=x<=2592000"),
    (["exporter", "--backend", "fake", "--once", "--no-efa", "--gpu-poll-interval", "nan"],
     "Invalid value for '--gpu-poll-interval': 'nan' is not a number"),
    (["exporter", "--backend", "fake", "--once", "--no-efa", "--gpu-deadline", "NaN"],
     "Invalid value for '--gpu-deadline': 'NaN' is not a number"),
]  # fmt: skip

# JobSpec numbers must be finite: before, memory_gib: .inf crashed `launch --on kubernetes --dry-run` with
# OverflowError, and backoff_s / step_sleep_s: .inf were rendered into the scripts as `inf`
BAD_FILES.update(
    {
        "s20a_job_mem_inf.yaml": "name: j\ncommand: ['true']\nimage: x:1\nmemory_gib: .inf\n",
        "s20a_job_backoff_inf.yaml": "name: j\ncommand: ['true']\nretry: {max_restarts: 1, backoff_s: .inf}\n",
        "s20a_job_sleep_nan.yaml": "name: j\nworkload: {step_sleep_s: .nan}\n",
    }
)
BAD_ARGV += [
    (["launch", "@file:s20a_job_mem_inf.yaml", "--on", "kubernetes", "--dry-run"],
     "field 'memory_gib': Input should be a finite number"),
    (["launch", "@file:s20a_job_backoff_inf.yaml", "--on", "slurm", "--dry-run"],
     "field 'retry.backoff_s': Input should be a finite number"),
    (["launch", "@file:s20a_job_sleep_nan.yaml", "--on", "local", "--dry-run"],
     "field 'workload.step_sleep_s': Input should be a finite number"),
]  # fmt: skip

# session 20, follow-ups of the fuzzing: training sizes, health counts, output paths (helper C): add rows here
_TRAIN_S20C = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge"]
_PLAN_S20C = ["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tokens", "1e12"]
_RL_S20C = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1"]
_HUGE_S20C, _HUGE_S20C_TEXT = "1" + "0" * 30, "1" + ",000" * 10
# no upper limit on training sizes: before, each of these ran and exited 0 (--micro-batch 10^30 printed "memory does
# NOT fit" with 3.8e31 GiB; plan train --global-batch 10^30 ranked a row printed as gb1000000000000000019884624838656)
BAD_ARGV += [
    ([*_TRAIN_S20C, "--nodes", "999999999999"],
     "nodes: 999,999,999,999 nodes x 8 GPUs = 7,999,999,999,992 GPUs; allowed: at most 1,048,576 (2^20) in one cluster"),
    ([*_TRAIN_S20C, "--gpus", "2097152"], "gpus: 2,097,152 GPUs; allowed: at most 1,048,576 (2^20) in one cluster"),
    ([*_TRAIN_S20C, "--nodes", "1", "--micro-batch", _HUGE_S20C],
     f"micro_batch: {_HUGE_S20C_TEXT} sequences per micro-batch (a part of the global batch); allowed: at most "
     "16,777,216 (2^24)"),
    ([*_TRAIN_S20C, "--nodes", "1", "--global-batch", str(2**24 + 8)],
     "global_batch: 16,777,224 sequences per step; allowed: at most 16,777,216 (2^24), 256 x the largest published"),
    ([*_PLAN_S20C, "--gpus", "16", "--global-batch", _HUGE_S20C],
     f"global_batch: {_HUGE_S20C_TEXT} sequences per step; allowed: at most 16,777,216 (2^24)"),
    ([*_PLAN_S20C, "--gpus", "100000000"], "gpus: 100,000,000 GPUs; allowed: at most 1,048,576 (2^20) in one cluster"),
    ([*_RL_S20C, "--prompts", _HUGE_S20C], f"prompts: {_HUGE_S20C_TEXT} prompts per step; allowed: at most 16,777,216"),
    ([*_RL_S20C, "--samples", _HUGE_S20C], f"samples: {_HUGE_S20C_TEXT} samples per prompt; allowed: at most 16,777,216"),
    ([*_RL_S20C, "--prompts", "100000", "--samples", "1000"],
     "samples: 100,000,000 sequences per step (--prompts 100,000 x --samples 1,000); allowed: at most 16,777,216"),
    (["simulate", "--ckpt-cost", "1e30"], "ckpt_cost: must be 0 to 86,400 seconds (a day), got 1e+30"),
    (["simulate", "--ckpt-cost", "nan"], "ckpt_cost: must be 0 to 86,400 seconds (a day), got nan"),
    (["simulate", "--ckpt-interval", "600000"],
     "ckpt_interval: 600000 minutes; allowed: at most 527,040 (366 days, the longest run)"),
]  # fmt: skip

# before: "no configuration has a valid shape; try more GPUs", though the global batch limited data parallelism
BAD_ARGV += [
    ([*_PLAN_S20C, "--gpus", "65536", "--global-batch", "16"],
     "global_batch: no layout of llama3.1-8b has a valid shape: data parallelism cannot exceed the global batch of 16 "
     "sequences, but on 65,536 p5.48xlarge GPUs the most model parallelism searched (tp 8 x pp 32 x cp 8 = 2,048 GPUs "
     "per replica) leaves dp = 32: use at most 32,768 GPUs, or a --global-batch that is a multiple of 32"),
    ([*_PLAN_S20C, "--gpus", "1048576", "--seq-len", "131072"],
     "the default, about 4M tokens = 32 sequences of 131,072 tokens, allows dp <= 64, but on 1,048,576 p5.48xlarge GPUs"),
    ([*_PLAN_S20C, "--gpus", "65536", "--global-batch", "48"],
     "global_batch: no layout of llama3.1-8b has a valid shape: dp x micro-batch must divide the global batch of 48"),
]  # fmt: skip

# more devices visible than expected: before, `health` decided "none" and said nothing
BAD_FILES.update(
    {
        "s20c_signals_gpus_over.json": '{"node": "n1", "gpus_visible": 9, "gpus_expected": 8}',
        "s20c_signals_efa_over.json": '[{"node": "n1"}, {"node": "n2", "efa_visible": 33, "efa_expected": 32}]',
        "s20c_job_time_limit.yaml": "name: j\ncommand: ['true']\nimage: x:1\ntime_limit_min: 99999999999999\n",
    }
)
BAD_ARGV += [
    (["health", "--signals", "@file:s20c_signals_gpus_over.json"],
     "signals[0].gpus_visible: 9 > gpus_expected 8: a node cannot show more than it has; set gpus_expected"),
    (["health", "--signals", "@file:s20c_signals_efa_over.json"], "signals[1].efa_visible: 33 > efa_expected 32"),
]  # fmt: skip

# output paths: before, --dashboards '' wrote the dashboards into the current folder, --hostname took '' and a
# newline, and time_limit_min 99999999999999 was rendered into sbatch --time and activeDeadlineSeconds
BAD_ARGV += [
    (["exporter", "--dashboards", ""], "--dashboards: an empty path ('') names the current folder; give one"),
    (["exporter", "--backend", "fake", "--once", "--no-efa", "--sysfs-root", ""], "--sysfs-root: an empty path ('')"),
    (["exporter", "--backend", "fake", "--once", "--no-efa", "--hostname", ""],
     "--hostname: '' is not a valid node name; allowed: letters, digits, '.', '_', '-'"),
    (["exporter", "--backend", "fake", "--once", "--no-efa", "--hostname", "n1\nevil"],
     "--hostname: 'n1\\nevil' is not a valid node name"),
    (["launch", "@file:s20c_job_time_limit.yaml", "--on", "slurm", "--dry-run"],
     "field 'time_limit_min': Value error, 99,999,999,999,999 minutes; allowed: 1 to 525,600 (365 days"),
    (["launch", "@file:s20c_job_time_limit.yaml", "--on", "kubernetes", "--dry-run"],
     "field 'time_limit_min': Value error, 99,999,999,999,999 minutes; allowed: 1 to 525,600"),
]  # fmt: skip
