"""A LoRA checkpoint logged to MLflow (tasks/reporting/registry.py): besides the merged `model/` and the
adapter's plain files in `adapter/`, `adapter_model/` is an MLflow transformers model of the peft
`PeftModel` that stores the adapter alone and loads on its base."""

from pathlib import Path

import torch
from tiny_chat_model import tiny_llama, tiny_tokenizer

from passband.training.rl.config import RLAlgoConfig
from test_lora import IDS, _randomize_b


def test_lora_checkpoint_logs_its_adapter_as_a_peft_model_on_its_base(tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from passband.tasks.artifacts.checkpoints import commit_checkpoint
    from passband.tasks.reporting import tracking
    from passband.tasks.reporting.registry import log_model
    from passband.training.rl.trainer import open_trainer, save_trainer

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    start = tmp_path / "start"
    tiny_llama(seed=0).save_pretrained(start)
    tiny_tokenizer().save_pretrained(start)
    trainer = open_trainer(start, ["math"], RLAlgoConfig(precision="fp32", lora={"rank": 2}))
    _randomize_b(trainer.model)  # B starts at 0: the adapter must move the logits for the checks below to bite
    trainer.state.iteration = 1
    saved = save_trainer(trainer, tmp_path / "checkpoints")
    uri = commit_checkpoint.fn(str(saved), "checkpoints/lora-mlflow", "test", {}, {})
    assert uri.startswith("file://")

    tracking.configure()
    with tracking.start_run("lora-mlflow") as run_id:
        log_model.fn(uri, run_id, "# LoRA test model")
    client = MlflowClient()
    assert {a.path for a in client.list_artifacts(run_id, "adapter")} == \
        {"adapter/adapter_model.safetensors", "adapter/adapter_config.json"}
    logged = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="adapter_model",
                                                      dst_path=str(tmp_path / "logged")))
    weights = sorted(path.relative_to(logged).as_posix() for path in logged.rglob("*.safetensors"))
    assert weights == ["peft/adapter_model.safetensors"]  # the base is referenced, not copied
    flavor = mlflow.models.Model.load(str(logged / "MLmodel")).flavors["transformers"]
    assert flavor["local_base_model_path"] == str(start) and flavor["torch_dtype"] == "torch.float32"
    assert (logged / "model_card.md").read_text() == "# LoRA test model"

    components = mlflow.transformers.load_model(f"runs:/{run_id}/adapter_model", return_type="components")
    model = components["model"].eval()
    assert isinstance(model, PeftModel)
    merged = AutoModelForCausalLM.from_pretrained(saved).eval()
    with torch.no_grad():
        logits = model(IDS).logits
        torch.testing.assert_close(logits, merged(IDS).logits, rtol=0, atol=1e-5)
        assert not torch.allclose(logits, tiny_llama(seed=0).eval()(IDS).logits, atol=1e-3)
