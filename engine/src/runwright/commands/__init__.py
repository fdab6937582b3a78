"""The commands that are not Trainer methods: export, report, lr_find/scale_batch_size (tune), sweep."""
