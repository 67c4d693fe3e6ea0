"""Peak RSS of each trainer rank at start-up: 2 gloo ranks open the RL trainer on SmolLM2-135M.

Each rank runs `open_rank_trainer` (training/rl/launch.py: the policy built, sharded by FSDP2 and
its weights loaded) and reports its high-water mark VmHWM after the imports (transformers' model
classes included) and after the start-up, beside the size of one full fp32 copy of the model. With kl_coef > 0 (--kl) the reference is
loaded and sharded too.

    .venv/bin/python scripts/bench_rank_startup_rss.py             # converts the shipped GGUF once
    .venv/bin/python scripts/bench_rank_startup_rss.py --model DIR --kl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def high_water_mb() -> float:
    """This process's peak resident set so far (VmHWM), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def warm_up_imports(model_dir: Path) -> None:
    """Import what building the model imports (transformers' model classes: ~300 MB here), by
    building it on the meta device (no weights), so that the start-up's growth is the weights'."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(model_dir)))


def rank_main(config_file: Path) -> None:
    """One rank (under torchrun): the trainer opened, its peaks printed as one JSON line."""
    import torch
    import yaml

    from passband.training.rl.launch import RanksConfig, open_rank_trainer
    from passband.training.runtime.distributed import close_process_group, rank

    config = RanksConfig.model_validate(yaml.safe_load(config_file.read_text()))
    warm_up_imports(config.model)
    after_imports = high_water_mb()
    trainer = open_rank_trainer(config)
    after_start = high_water_mb()
    full_mb = sum(p.numel() for p in trainer.model.parameters()) * 4 / 2**20  # DTensor numel: the full shape
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    print(json.dumps({"rank": rank(), "peak_after_imports_mb": round(after_imports),
                      "peak_after_startup_mb": round(after_start), "startup_growth_mb": round(after_start - after_imports),
                      "full_fp32_copy_mb": round(full_mb)}), flush=True)
    del trainer
    close_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a safetensors model dir (default: the shipped SmolLM2-135M)")
    parser.add_argument("--kl", action="store_true", help="kl_coef 0.05: the reference model is loaded too")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rank-config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_config is not None:
        rank_main(args.rank_config)
        return
    import yaml

    work = Path(tempfile.mkdtemp(prefix="rank-rss-"))
    model = args.model
    if model is None:
        from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

        model = gguf_to_safetensors(smollm2_gguf_path(), work / "model")
    algo = {"precision": "fp32", "kl_coef": 0.05 if args.kl else 0.0}
    config_file = work / "ranks.yaml"
    config_file.write_text(yaml.safe_dump({"model": str(model), "algo": algo, "work_dir": str(work / "ranks")}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(args.nproc), __file__, "--rank-config", str(config_file)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    for line in sorted(line for line in done.stdout.splitlines() if line.startswith("{")):
        print(line)


if __name__ == "__main__":
    main()
