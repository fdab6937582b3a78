"""``LightningTransformer`` of ``lightning.pytorch.demos.transformer``: a module with its own
``train_dataloader`` and ``prepare_data`` (no DataModule), ``forward(inputs, target)``, no validation,
test or predict step; it logs nothing. As in the demo but for three changes: the network is 16 wide with
one layer (``Transformer(vocab_size, ninp=16, nhead=2, nhid=16, nlayers=1)``), ``prepare_data`` writes a
tiny text (700 words of a 40-word vocabulary) where the demo downloads WikiText-2, and it sets an
``example_input_array`` (``(inputs, target)``, as Lightning's docs advise for export). The demo's
``WikiText2`` reads the text as it would the download."""

import random
from pathlib import Path

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.demos.transformer import Transformer, WikiText2
from torch import Tensor
from torch.utils.data import DataLoader


def write_tiny_text(path: Path = Path("./data/wikitext-2.txt")) -> None:
    """20 lines of 35 words drawn (seeded) from ``w0`` ... ``w39``."""
    words = random.Random(0).choices([f"w{i}" for i in range(40)], k=700)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(" ".join(words[i : i + 35]) + "\n" for i in range(0, 700, 35)))


class LightningTransformer(LightningModule):
    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=16, nhead=2, nhid=16, nlayers=1)
        self.example_input_array = (
            torch.zeros(2, 35, dtype=torch.long),
            torch.zeros(2, 35, dtype=torch.long),
        )

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        output = self(inputs, target)
        loss = torch.nn.functional.nll_loss(output, target.view(-1))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        write_tiny_text()  # the demo: WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        dataset = WikiText2(download=False)
        return DataLoader(dataset)
