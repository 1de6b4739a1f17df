"""A fast speed model for unit tests (the real one is exercised by the Llama 3 and CLI tests)."""

from __future__ import annotations


class FlatSpeed:
    """tokens/s = 1000 per GPU; split jobs 0.9x: a fake implementing JobSpeedModel."""

    def tokens_per_s(self, model: str, num_gpus: int, packed: bool) -> float:
        return 1000.0 * num_gpus * (1.0 if packed else 0.9)
