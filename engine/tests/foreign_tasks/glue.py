"""The Lightning tutorial "Finetune Transformers Models with PyTorch Lightning"
(github.com/Lightning-AI/tutorials, ``lightning_examples/text-transformers/text-transformers.py``):
``GLUEDataModule`` and ``GLUETransformer`` for MRPC, whose batches are dicts (``input_ids``,
``attention_mask``, ``labels``) passed to ``forward(**inputs)``, and whose metrics (``val_loss``,
``accuracy``, ``f1``) are logged in ``on_validation_epoch_end``. Nothing is downloaded: Hugging Face's
tokenizer, GLUE data and pretrained model are replaced by :func:`tiny_glue` (token ids ``[L]`` int64 from a
32-token vocabulary, a 0/1 attention mask, a label learnable from the tokens; 48 training, 21 validation
and 21 test samples) and :class:`TinySequenceClassifier` (embedding, masked mean, linear: an
``AutoModelForSequenceClassification`` returning ``(loss, logits)`` for ``labels``), the ``evaluate`` GLUE
metric by scikit-learn's accuracy and F1 (what it computes), and ``get_linear_schedule_with_warmup`` by
the same schedule. One method is added to the tutorial's: a ``test_step``, for ``test``."""

from collections import defaultdict

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from sklearn.metrics import accuracy_score, f1_score
from torch import nn
from torch.optim import AdamW
from torch.utils.data import DataLoader

VOCAB = 32


def tiny_glue(num_samples, max_seq_length, seed):
    """``num_samples`` feature dicts; the label says whether most unmasked tokens are below ``VOCAB / 2``."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB, (num_samples, max_seq_length), generator=generator)
    lengths = torch.randint(max_seq_length // 2, max_seq_length + 1, (num_samples, 1), generator=generator)
    attention_mask = (torch.arange(max_seq_length) < lengths).long()
    input_ids = input_ids * attention_mask
    labels = (((input_ids < VOCAB // 2) & (attention_mask == 1)).sum(1) * 2 > lengths[:, 0]).long()
    return [
        {"input_ids": i, "attention_mask": m, "labels": y}
        for i, m, y in zip(input_ids, attention_mask, labels, strict=True)
    ]


class TinySequenceClassifier(nn.Module):
    def __init__(self, num_labels):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, 16)
        self.classifier = nn.Linear(16, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        mask = attention_mask.unsqueeze(-1).float()
        logits = self.classifier((self.embeddings(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1))
        return logits if labels is None else (nn.functional.cross_entropy(logits, labels), logits)


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


class GLUEDataModule(LightningDataModule):
    glue_task_num_labels = {"mrpc": 2}

    def __init__(
        self,
        model_name_or_path: str,
        task_name: str = "mrpc",
        max_seq_length: int = 128,
        train_batch_size: int = 32,
        eval_batch_size: int = 32,
        **kwargs,
    ):
        super().__init__()
        self.model_name_or_path = model_name_or_path
        self.task_name = task_name
        self.max_seq_length = max_seq_length
        self.train_batch_size = train_batch_size
        self.eval_batch_size = eval_batch_size
        self.num_labels = self.glue_task_num_labels[task_name]

    def setup(self, stage: str):
        sizes = {"train": 48, "validation": 21, "test": 21}
        self.dataset = {
            split: tiny_glue(n, self.max_seq_length, i) for i, (split, n) in enumerate(sizes.items())
        }
        self.eval_splits = [x for x in self.dataset if "validation" in x]

    def train_dataloader(self):
        return DataLoader(self.dataset["train"], batch_size=self.train_batch_size)

    def val_dataloader(self):
        if len(self.eval_splits) == 1:
            return DataLoader(self.dataset["validation"], batch_size=self.eval_batch_size)
        elif len(self.eval_splits) > 1:
            return [DataLoader(self.dataset[x], batch_size=self.eval_batch_size) for x in self.eval_splits]

    def test_dataloader(self):
        if len(self.eval_splits) == 1:
            return DataLoader(self.dataset["test"], batch_size=self.eval_batch_size)
        elif len(self.eval_splits) > 1:
            return [DataLoader(self.dataset[x], batch_size=self.eval_batch_size) for x in self.eval_splits]


class GLUETransformer(LightningModule):
    def __init__(
        self,
        model_name_or_path: str,
        num_labels: int,
        task_name: str,
        learning_rate: float = 2e-5,
        adam_epsilon: float = 1e-8,
        warmup_steps: int = 0,
        weight_decay: float = 0.0,
        train_batch_size: int = 32,
        eval_batch_size: int = 32,
        eval_splits: list | None = None,
        **kwargs,
    ):
        super().__init__()

        self.save_hyperparameters()

        self.model = TinySequenceClassifier(num_labels)  # AutoModelForSequenceClassification.from_pretrained
        self.outputs = defaultdict(list)

    def forward(self, **inputs):
        return self.model(**inputs)

    def training_step(self, batch, batch_idx):
        outputs = self(**batch)
        loss = outputs[0]
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        outputs = self(**batch)
        val_loss, logits = outputs[:2]

        if self.hparams.num_labels > 1:
            preds = torch.argmax(logits, axis=1)
        elif self.hparams.num_labels == 1:
            preds = logits.squeeze()

        labels = batch["labels"]

        self.outputs[dataloader_idx].append({"loss": val_loss, "preds": preds, "labels": labels})

    def on_validation_epoch_end(self):
        flat_outputs = []
        for lst in self.outputs.values():
            flat_outputs.extend(lst)

        preds = torch.cat([x["preds"] for x in flat_outputs]).detach().cpu().numpy()
        labels = torch.cat([x["labels"] for x in flat_outputs]).detach().cpu().numpy()
        loss = torch.stack([x["loss"] for x in flat_outputs]).mean()
        self.log("val_loss", loss, prog_bar=True)
        metric = {"accuracy": accuracy_score(labels, preds), "f1": f1_score(labels, preds)}  # evaluate's glue
        self.log_dict(metric, prog_bar=True)
        self.outputs.clear()

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self(**batch)[0])

    def configure_optimizers(self):
        """Prepare optimizer and schedule (linear warmup and decay)."""
        model = self.model
        no_decay = ["bias", "LayerNorm.weight"]
        optimizer_grouped_parameters = [
            {
                "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
                "weight_decay": self.hparams.weight_decay,
            },
            {
                "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
                "weight_decay": 0.0,
            },
        ]
        optimizer = AdamW(
            optimizer_grouped_parameters, lr=self.hparams.learning_rate, eps=self.hparams.adam_epsilon
        )

        scheduler = get_linear_schedule_with_warmup(
            optimizer,
            num_warmup_steps=self.hparams.warmup_steps,
            num_training_steps=self.trainer.estimated_stepping_batches,
        )
        scheduler = {"scheduler": scheduler, "interval": "step", "frequency": 1}
        return [optimizer], [scheduler]
