"""A stand-in for `torch.cuda`'s device count and random generators on a CPU machine: `count`
devices, each with its own generator state (16 bytes, as CUDA's Philox state), read and set by
device index as torch does. Setting the state of a device the process does not have raises what
torch raises there (`torch.cuda.default_generators[idx]`: `IndexError: tuple index out of range`)."""

from __future__ import annotations

import pytest
import torch
import torch.cuda.random


class FakeCuda:
    def __init__(self, count: int, current: int = 0) -> None:
        self.count, self.current = count, current
        self.states = [torch.full((16,), 10 + i, dtype=torch.uint8) for i in range(count)]

    def _index(self, device) -> int:
        if device is None or device == "cuda":
            return self.current
        index = torch.device(device).index if not isinstance(device, int) else device
        return self.current if index is None else index

    def get_rng_state(self, device="cuda") -> torch.Tensor:
        return self.states[self._index(device)].clone()

    def set_rng_state(self, new_state: torch.Tensor, device="cuda") -> None:
        index = self._index(device)
        if index >= self.count:
            raise IndexError("tuple index out of range")
        self.states[index] = new_state.clone()

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.count)]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
        """Replaces torch.cuda's functions (and those `torch.cuda.set_rng_state_all` calls)."""
        for module in (torch.cuda, torch.cuda.random):
            monkeypatch.setattr(module, "get_rng_state", self.get_rng_state)
            monkeypatch.setattr(module, "set_rng_state", self.set_rng_state)
            monkeypatch.setattr(module, "get_rng_state_all", self.get_rng_state_all)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        return self
