"""Lightning's ``BoringModel`` with several evaluation loaders (``lightning.pytorch.demos.boring_classes``).

:class:`SeveralLoaders` is the demos' ``IterableBoringDataModule``: each evaluation split is two loaders,
a map-style part of a ``RandomDataset`` made in ``__init__`` (as ``BoringDataModule`` does) and an
``IterableDataset`` without ``__len__`` (``RandomIterableDataset``), 15 samples each, of 32 features as
``BoringModel`` takes; one training loader. :class:`SeveralLoadersModel` is ``BoringModel`` subclassed as
its docstring says, logging its loss per loader as Lightning's docs on several dataloaders do
(``val_loss/dataloader_idx_0``, ...). Batches are bare tensors ``[B, 32]``. ``BoringModel`` itself
(dataloaders on the model, nothing logged) is used unchanged by the tests."""

from lightning.pytorch import LightningDataModule
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset
from lightning_utilities import apply_to_collection
from torch.utils.data import DataLoader, Dataset, Subset

#: Samples in each evaluation loader.
SIZE = 15


class SeveralLoaders(LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 + 3 * SIZE)

    def setup(self, stage: str) -> None:
        def split(i):
            return [
                Subset(self.random_full, range(64 + i * SIZE, 64 + (i + 1) * SIZE)),
                RandomIterableDataset(32, SIZE),
            ]

        if stage == "fit":
            self.train_datasets = Subset(self.random_full, indices=range(64))

        if stage in ("fit", "validate"):
            self.val_datasets = split(0)

        if stage == "test":
            self.test_datasets = split(1)

        if stage == "predict":
            self.predict_datasets = split(2)

    def train_dataloader(self):
        return DataLoader(self.train_datasets)

    def val_dataloader(self):
        return apply_to_collection(self.val_datasets, Dataset, lambda x: DataLoader(x))

    def test_dataloader(self):
        return apply_to_collection(self.test_datasets, Dataset, lambda x: DataLoader(x))

    def predict_dataloader(self):
        return apply_to_collection(self.predict_datasets, Dataset, lambda x: DataLoader(x))


class SeveralLoadersModel(BoringModel):
    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        loss = self.step(batch)
        self.log("val_loss", loss)
        return {"x": loss}

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        loss = self.step(batch)
        self.log("test_loss", loss)
        return {"y": loss}

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch)
