"""Job-side training scripts the lessons submit (run them with ``python -m hpcnb.scripts.<name>``).

* ``single_train``   — the tiny model on one device: the starting point.
* ``ddp_node_train`` — DistributedDataParallel on the devices of **one** node (one srun task each).
* ``ddp_train``      — DistributedDataParallel across nodes; under ``srun`` (one task per device)
  or ``torchrun`` (one launcher per node).
* ``lightning_train`` — the same model as a LightningModule, ``Trainer(num_nodes=..., devices=...)``.
* ``horovod_train``  — the same training with Horovod (``horovodrun --gloo``).

Each writes ``<out>.json`` and ``<out>.pt`` from rank 0 only (see :func:`hpcnb.lessons.training.save_result`).
Nothing here is imported by ``import hpcnb``.
"""
