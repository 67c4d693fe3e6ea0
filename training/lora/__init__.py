"""LoRA adapters on a frozen base (peft): the setting, attaching, the reference view, merged export."""
