"""The model leaves the pipeline: EUROPA checkpoints as Hugging Face `DeepseekV3ForCausalLM` folders.

- `export_checkpoint` (convert.py): DCP checkpoint -> sharded safetensors, config, tokenizer, SHA256SUMS.
- `hf_config` (config.py): a flavor's torchtitan config -> `transformers.DeepseekV3Config`.
- `generate` (generate.py): text from an exported folder (or a checkpoint, exported on the fly).

Every error is a ValueError subclass whose message names the file or key and the fix.
"""

from europa_model.hf.config import HFConfigError, hf_config
from europa_model.hf.convert import (
    DEFAULT_MAX_SHARD_BYTES,
    CheckpointError,
    ExportError,
    ExportPlanError,
    ExportResult,
    export_checkpoint,
)

__all__ = ["DEFAULT_MAX_SHARD_BYTES", "CheckpointError", "ExportError", "ExportPlanError", "ExportResult",
           "HFConfigError", "export_checkpoint", "hf_config"]
