"""The lesson's synthetic dataset and tiny CNN, and batches made on the device itself."""
from __future__ import annotations

from typing import Any

from .rows import Config
from .hardware import device


class SyntheticImages:
    """A map-style dataset of ``n`` labelled images generated on demand (nothing downloaded).

    Sample ``i`` is always the same image: class prototype + noise, then ``work`` rounds of
    augmentation (random shift, random flip, 3x3 blur) and normalisation. ``work`` sets how
    much CPU a sample costs, standing in for decoding and augmenting a real image.
    """

    def __init__(self, n: int = 512, size: int = 32, classes: int = 10, work: int = 6, seed: int = 0):
        if n < 1 or size < 4 or classes < 2 or work < 0:
            raise ValueError("need n >= 1, size >= 4, classes >= 2, work >= 0")
        self.n, self.size, self.classes, self.work, self.seed = n, size, classes, work, seed
        self._protos = None

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return (f"SyntheticImages(n={self.n}, size={self.size}, classes={self.classes}, "
                f"work={self.work}, seed={self.seed})")

    def spec(self) -> dict[str, int]:
        return {"n": self.n, "size": self.size, "classes": self.classes, "work": self.work, "seed": self.seed}

    def _prototypes(self):
        import torch

        if self._protos is None:
            g = torch.Generator().manual_seed(self.seed)
            self._protos = torch.randn(self.classes, 3, self.size, self.size, generator=g)
        return self._protos

    def __getitem__(self, i: int):
        import torch
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i + 1)
        label = int(torch.randint(self.classes, (), generator=g))
        img = self._prototypes()[label] + 0.8 * torch.randn(3, self.size, self.size, generator=g)
        for _ in range(self.work):
            dx, dy = torch.randint(-2, 3, (2,), generator=g).tolist()
            img = torch.roll(img, shifts=(dy, dx), dims=(1, 2))
            if float(torch.rand((), generator=g)) < 0.5:
                img = img.flip(2)
            img = 0.5 * img + 0.25 * (img.roll(1, 1) + img.roll(1, 2))  # a cheap blur
        img = (img - img.mean()) / (img.std() + 1e-6)
        return img, label


def make_model(size: int = 32, classes: int = 10, width: int = 16):
    """A small CNN: two conv blocks and a linear classifier (about 25k parameters at width 16)."""
    from torch import nn

    if size % 4:
        raise ValueError("size must be a multiple of 4 (two 2x2 poolings)")
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * (size // 4) ** 2, classes),
    )


class DeviceBatches:
    """Batches of ``dataset``'s kind made on ``dev`` itself: one epoch of ``len(dataset) // batch``.

    The same recipe as :class:`SyntheticImages` (class prototype + noise, ``work`` rounds of
    shift, flip and blur, then normalisation), vectorised over the batch on the device (one shift
    per batch, a flip per sample), so no CPU worker stands between the data and a GPU. For real
    data the same fix is to keep the decoded dataset on the GPU and augment it there.
    """

    def __init__(self, dataset, batch_size: int, dev: str, seed: int = 0):
        if len(dataset) < batch_size:
            raise ValueError(f"dataset has {len(dataset)} samples, fewer than one batch of {batch_size}")
        import torch

        self.data, self.batch_size, self.dev = dataset, batch_size, dev
        self.protos = dataset._prototypes().to(dev)
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.shifts = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.data) // self.batch_size

    def __iter__(self):
        for _ in range(len(self)):
            yield self._batch()

    def _batch(self):
        import torch

        n, size, g = self.batch_size, self.data.size, self.gen
        labels = torch.randint(self.data.classes, (n,), device=self.dev, generator=g)
        img = self.protos[labels] + 0.8 * torch.randn(n, 3, size, size, device=self.dev, generator=g)
        for _ in range(self.data.work):
            dx, dy = torch.randint(-2, 3, (2,), generator=self.shifts).tolist()  # on the CPU: no sync
            img = torch.roll(img, shifts=(dy, dx), dims=(2, 3))
            flip = torch.rand(n, 1, 1, 1, device=self.dev, generator=g) < 0.5
            img = torch.where(flip, img.flip(3), img)
            img = 0.5 * img + 0.25 * (img.roll(1, 2) + img.roll(1, 3))
        mean = img.mean(dim=(1, 2, 3), keepdim=True)
        return (img - mean) / (img.std(dim=(1, 2, 3), keepdim=True) + 1e-6), labels


def make_loader(dataset, cfg: Config, shuffle: bool = True, seed: int = 0, dev: str | None = None):
    """A DataLoader for ``cfg`` (options that need workers are left out when there are none),
    or :class:`DeviceBatches` on ``dev`` when ``cfg.data_on_device``."""
    import torch
    from torch.utils.data import DataLoader

    if cfg.data_on_device:
        return DeviceBatches(dataset, cfg.batch_size, dev or device(), seed)

    kwargs: dict[str, Any] = {"batch_size": cfg.batch_size, "shuffle": shuffle, "drop_last": True,
                              "num_workers": cfg.num_workers, "pin_memory": cfg.pin_memory,
                              "generator": torch.Generator().manual_seed(seed)}
    if cfg.num_workers > 0:
        kwargs["persistent_workers"] = cfg.persistent_workers
        if cfg.prefetch_factor is not None:
            kwargs["prefetch_factor"] = cfg.prefetch_factor
    if len(dataset) < cfg.batch_size:
        raise ValueError(f"dataset has {len(dataset)} samples, fewer than one batch of {cfg.batch_size}")
    return DataLoader(dataset, **kwargs)


def _synthetic_batch(batch: int, dev: str, size: int = 32, classes: int = 10):
    import torch

    g = torch.Generator(device=dev).manual_seed(batch)
    x = torch.randn(batch, 3, size, size, device=dev, generator=g)
    y = torch.randint(classes, (batch,), device=dev, generator=g)
    return x, y
