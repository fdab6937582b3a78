"""``LitAutoEncoder`` of Lightning's ``examples/pytorch/basics/autoencoder.py``
(github.com/Lightning-AI/pytorch-lightning), as it is: ``forward`` takes flattened images ``[B, 784]``
while its batches are ``(images [B, 1, 28, 28], labels)``, and it logs ``<stage>_loss`` with
``on_step=True`` (Lightning writes ``val_loss_step`` and ``val_loss_epoch``). Its data:
:class:`~foreign_tasks.mnist.MyDataModule`. (The example's ``ImageSampler`` callback is left out.)"""

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import nn


class LitAutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 64, learning_rate=10e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 28 * 28))

    def forward(self, x):
        z = self.encoder(x)
        return self.decoder(z)

    def training_step(self, batch, batch_idx):
        return self._common_step(batch, batch_idx, "train")

    def validation_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "val")

    def test_step(self, batch, batch_idx):
        self._common_step(batch, batch_idx, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=None):
        x = self._prepare_batch(batch)
        return self(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def _prepare_batch(self, batch):
        x, _ = batch
        return x.view(x.size(0), -1)

    def _common_step(self, batch, batch_idx, stage: str):
        x = self._prepare_batch(batch)
        loss = F.mse_loss(x, self(x))
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss
