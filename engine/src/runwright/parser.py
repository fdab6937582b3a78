"""LightningCLI's parser with errors that suggest the fix: a misspelt key or class name is one ``error:``
line naming it, the closest valid name (``difflib``) and, for a ``--config`` file, the file; a class of
the wrong kind is one line naming the class it must subclass (for a class built on ``pytorch_lightning``,
the ``lightning.pytorch`` import to use).

jsonargparse's own message, its lines joined into one, for every other error. The explanation reads
what jsonargparse parsed (the exception chain, the namespace, the unrecognized arguments), never the
command line or a YAML file as text; to name the file of a misspelt key it loads the ``--config`` files
that were read (YAML) and looks the key up. Its ``--config`` (:class:`ConfigFile`) is refused before the
subcommand and warns for a value given before it that it replaces."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import torch
import yaml
from jsonargparse import ActionConfigFile, Namespace
from lightning.pytorch.utilities import rank_zero_only

from .private import RecordsUnrecognized, instance_typed, rejected_class, unresolved_class_name


def closest(name: str, choices: Iterable[str]) -> list[str]:
    """The choice closest to ``name`` (difflib's ratio at least 0.6, ignoring case: `Adamw` is `AdamW`),
    with any that differ from it only in case; ``[]`` if none is close."""
    unique = list(dict.fromkeys(choices))  # (once each, in order)
    match = difflib.get_close_matches(name.lower(), [choice.lower() for choice in unique], n=1)
    return [choice for choice in unique if match and choice.lower() == match[0]]


def did_you_mean(options: list[str]) -> str:
    """``"; did you mean `a` or `b`?"``, or ``""`` for no options."""
    return "; did you mean " + " or ".join(f"`{option}`" for option in options) + "?" if options else ""


class UnknownKey(KeyError):
    """A key a parser does not take: ``key`` (dotted), the keys it does take, the ``--config`` files read."""

    def __init__(self, key: str, choices: list[str], files: list[Path]) -> None:
        super().__init__(key)
        self.key, self.choices, self.files = key, choices, files


def file_with(key: str, files: Iterable[Path]) -> Path | None:
    """The last of ``files`` (YAML) that sets the dotted ``key``, or ``None``."""
    found = None
    for file in files:
        try:
            node: Any = yaml.safe_load(Path(file).read_text())
        except (OSError, yaml.YAMLError):
            continue
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        found = file if node is not None else found
    return found


def in_class(key: str, namespace: Namespace) -> bool:
    """Whether ``key`` lies inside a class's value (``class_path``/``init_args``), which that class's own
    parser checks (``strip_unknown`` drops such a value's keys)."""
    parts = key.split(".")
    parents = (namespace.get(".".join(parts[:n])) for n in range(1, len(parts)))
    return any(isinstance(parent, Namespace) and "class_path" in parent for parent in parents)


#: The fix for a short class name with no class of that name.
MODULE_PATH = " (import the class in the package's __init__.py, or give its whole path: module.Class)"


#: Lightning's package, and ``pytorch_lightning``: the same code under another name, so other classes (a
#: ``pytorch_lightning.LightningModule`` subclass is no ``lightning.pytorch.LightningModule`` subclass).
LIGHTNING, STANDALONE = "lightning.pytorch", "pytorch_lightning"


def public_path(cls: type) -> str:
    """``cls``'s path from the shortest of its module's imported parents that has it, within
    ``lightning.pytorch`` for Lightning's classes (``lightning.pytorch.LightningModule``, not
    ``lightning.pytorch.core.module.LightningModule``, as Lightning's docs import them)."""
    parts = cls.__module__.split(".")
    start = LIGHTNING.count(".") + 1 if f"{cls.__module__}.".startswith(f"{LIGHTNING}.") else 1
    for n in range(start, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:n]))
        if getattr(module, cls.__qualname__, None) is cls:
            return f"{module.__name__}.{cls.__qualname__}"  # type: ignore[union-attr]
    return f"{cls.__module__}.{cls.__qualname__}"


def twin(cls: type, package: str, other: str) -> type | None:
    """The class of ``cls``'s name in the module of ``other`` (an imported package) that mirrors
    ``cls``'s module in ``package``, or ``None``."""
    if not f"{cls.__module__}.".startswith(f"{package}."):
        return None
    found = getattr(sys.modules.get(other + cls.__module__.removeprefix(package)), cls.__qualname__, None)
    return found if isinstance(found, type) and found is not cls else None


def not_a_subclass(cls: type, bases: tuple[type, ...], at: str) -> str:
    """One line for ``cls`` given where a subclass of one of ``bases`` is needed; for a class built on
    ``pytorch_lightning`` it names the ``lightning.pytorch`` import to use instead."""
    path = public_path(cls)
    for mirrored in (c for c in cls.__mro__ if c.__module__.partition(".")[0] == STANDALONE):
        own = twin(mirrored, STANDALONE, LIGHTNING)
        if own is not None and issubclass(own, bases):
            module, _, name = public_path(own).rpartition(".")
            if mirrored is cls:
                return f"`{path}`{at} is another package's copy of {module}.{name}: give `{module}.{name}`"
            return (
                f"`{path}`{at} is built on {public_path(mirrored)}, which is not {module}.{name} (another "
                f"package's copy of it): import `from {module} import {name}` in its module, not {STANDALONE}"
            )
    return f"`{path}`{at} is not a subclass of {' or '.join(public_path(base) for base in bases)}"


def subclass_named(name: str, bases: Iterable[type]) -> type | None:
    """A subclass of one of ``bases`` (or of a base itself) named ``name``, or ``None``."""
    todo = list(bases)
    while todo:
        cls = todo.pop()
        if cls.__name__ == name:
            return cls
        todo += cls.__subclasses__()
    return None


#: Argument types that are objects built from the model's parameters (or its optimizer), and the
#: callable type LightningCLI gives such an argument instead.
CALLABLES_OF: dict[type, str] = {
    torch.optim.Optimizer: "OptimizerCallable",
    torch.optim.lr_scheduler.LRScheduler: "LRSchedulerCallable",
    torch.optim.lr_scheduler.ReduceLROnPlateau: "LRSchedulerCallable",
}


def explain(
    error: BaseException | None, unrecognized: list[str], options: Iterable[str], reading: str | None = None
) -> str | None:
    """One line for a misspelt name or a class of the wrong kind, or ``None`` for another error.

    In ``error``'s chain: an :class:`UnknownKey`, the ``AttributeError`` of a class path whose
    module lacks the name (``acme.models.Classifer``), a short class name no class has, or a class that
    is not a subclass of the argument's type (:func:`not_a_subclass`; a short name of a class built on
    ``pytorch_lightning`` too); ``reading`` is the ``--config`` file being read. Otherwise the first of
    ``unrecognized`` (command-line arguments no option took) against ``options`` (the parser's option
    strings)."""
    at = f" (in {reading})" if reading else ""
    while error is not None:
        if isinstance(error, UnknownKey):
            where = file_with(error.key, error.files) or reading
            there = f" (in {where})" if where else ""
            return f"unknown key `{error.key}`{there}{did_you_mean(closest(error.key, error.choices))}"
        if isinstance(error, AttributeError) and isinstance(error.obj, ModuleType) and error.name:
            module = error.obj.__name__
            names = [  # (its classes and functions, not its submodules; compared without the module)
                attribute
                for attribute, value in vars(error.obj).items()
                if not attribute.startswith("_") and not isinstance(value, ModuleType)
            ]
            close = did_you_mean([f"{module}.{name}" for name in closest(error.name, names)])
            return f"`{module}.{error.name}` does not exist{at}{close}"
        if unresolved := unresolved_class_name(error):
            name, bases, paths = unresolved
            kinds = [base.__name__ for base in bases]
            mirrors = [mirror for base in bases if (mirror := twin(base, LIGHTNING, STANDALONE))]
            if (found := subclass_named(name, mirrors)) is not None:  # (a pytorch_lightning class)
                return not_a_subclass(found, bases, at)
            shorts = [path.rpartition(".")[2] for path in paths]
            near = closest(name, [short for short in shorts if short not in kinds])  # (not the base itself)
            suggested = [  # the short name, or its class paths when several classes have it
                path if shorts.count(short) > 1 else short
                for short in near
                for path, own in zip(paths, shorts, strict=True)
                if own == short
            ]
            close_or_fix = did_you_mean(suggested) or MODULE_PATH
            return f"no {' or '.join(kinds)} subclass is named `{name}`{at}{close_or_fix}"
        if (typed := instance_typed(error, tuple(CALLABLES_OF))) is not None:
            kind = next(name for base, name in CALLABLES_OF.items() if issubclass(typed, base))
            return (
                f"an argument of the model is typed {public_path(typed)}, an object built before the model's "
                f"parameters exist (Hydra's partial); type it {kind} (from lightning.pytorch.cli import "
                f"{kind}) and build it in configure_optimizers (self.optimizer(self.parameters()))"
            )
        if rejected := rejected_class(error):
            return not_a_subclass(*rejected, at)
        error = error.__cause__ or error.__context__
    if unrecognized:
        option = unrecognized[0].partition("=")[0]
        return f"unrecognized argument `{option}`{did_you_mean(closest(option, options))}"
    return None


class Parser(RecordsUnrecognized):
    """LightningCLI's parser (``parser_class``): an error for a misspelt name is one line (:func:`explain`).

    ``reading`` is the ``--config`` file being read (set by the CLI's ``--config`` action), named in the
    error of a class path in it; ``unrecognized`` (``resume.RecordsUnrecognized``) the arguments no option
    took."""

    reading: str | None = None
    #: The defaults (:meth:`get_defaults`) once computed, and whether their validation was skipped.
    _cached_defaults: tuple[Namespace, bool] | None = None

    def dump(self, cfg: Namespace, *args: Any, **kwargs: Any) -> str:
        """jsonargparse's ``dump``, without validating again a config it parsed (``skip_validation``
        unless given): LightningCLI dumps the parsed config for the hyperparameters of each class it
        builds (each check cost about 0.1 CPU-s of a command)."""
        kwargs.setdefault("skip_validation", True)
        return super().dump(cfg, *args, **kwargs)

    def save(self, cfg: Namespace, *args: Any, **kwargs: Any) -> None:
        """jsonargparse's ``save``, without validating again (as :meth:`dump`): ``config.yaml`` is the
        parsed config (about 0.09 CPU-s of a warm ``fit`` of the tests' fixture)."""
        kwargs.setdefault("skip_validation", True)
        super().save(cfg, *args, **kwargs)

    def get_defaults(self, skip_validation: bool = False, **kwargs: Any) -> Namespace:
        """jsonargparse's defaults (the arguments' own, then the default config files), computed once
        per parser and copied at each call: a subcommand's parse asks for them twice, the CLI once more
        (each time loading every default config file and checking every class in it)."""
        if self._cached_defaults is None or kwargs or (self._cached_defaults[1] and not skip_validation):
            self._cached_defaults = (super().get_defaults(skip_validation, **kwargs), skip_validation)
        return self._cached_defaults[0].clone()

    def validate(self, namespace: Namespace, *args: Any, **kwargs: Any) -> None:
        """jsonargparse's check; a key this parser does not take raises :class:`UnknownKey`."""
        try:
            super().validate(namespace, *args, **kwargs)
        except KeyError as error:
            known = self.strip_unknown(namespace)
            keys, given = list(known.keys()), list(namespace.keys())  # (dotted; iterating gives no keys)
            unknown = [key for key in given if key not in known and not in_class(key, namespace)]
            if not unknown:
                raise
            key = unknown[0]
            prefix = key.partition(".")[0] + "." if "subcommand" in namespace else ""
            files = [file for file in known.get(f"{prefix}config") or [] if file is not None]
            dests = [action.dest for action in self._actions]  # (a list item's namespace has no defaults)
            choices = [choice.removeprefix(prefix) for choice in keys] + dests
            raise UnknownKey(key.removeprefix(prefix), choices, files) from error

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """:func:`explain`'s one line, else jsonargparse's message on one line (its lines joined)."""
        options = [option for action in self._actions for option in action.option_strings]
        super().error(explain(ex, self.unrecognized, options, self.reading) or " ".join(message.split()), ex)


class ConfigFile(ActionConfigFile):
    """``--config FILE`` (or a YAML string, named by its first line, a ``# <name>`` comment), named in the
    error of a misspelt name in it; before the subcommand (where jsonargparse would read only a section
    named after it) it is refused (``before_subcommand``)."""

    before_subcommand = False

    def __call__(self, parser: Any, cfg: Any, values: Any, option_string: str | None = None) -> None:
        """Let jsonargparse read ``values``, the file being read named on the parser meanwhile; warn (one
        line each) for a value given on the command line before it that it replaces."""
        if self.before_subcommand:
            fix = f"{parser.prog} fit --config {values}"
            parser.error(f"--config {values} comes before the subcommand; put it after: {fix}")
        text = str(values)
        parser.reading = name = text.partition("\n")[0].removeprefix("# ") if "\n" in text else text
        before, settled = dict(cfg.items()), getattr(parser, "settled", None)
        try:
            super().__call__(parser, cfg, values, option_string)
        finally:
            parser.reading = None
        if settled is not None:  # (the arguments since the last --config moved these away from settled)
            for key, value in before.items():
                if value != settled.get(key, value) and cfg.get(key) != value:
                    rank_zero_only(print)(
                        f"warning: --config {name} sets {key}={cfg.get(key)!r} over the {value!r} given "
                        f"before it (later arguments win); give --{key} after --config to keep it",
                        file=sys.stderr,
                        flush=True,
                    )
            parser.settled = cfg.clone()


class ConfigBeforeSubcommand(ConfigFile):
    before_subcommand = True
