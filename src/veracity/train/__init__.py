"""LoRA fine-tuning (``veracity[train]``): TRL's SFT trainer with PEFT adapters."""
