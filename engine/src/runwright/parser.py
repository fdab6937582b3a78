"""LightningCLI's parser with errors that suggest the fix: a misspelt key or class name is one ``error:``
line naming it, the closest valid name (``difflib``) and, for a ``--config`` file, the file.

jsonargparse's own message stays for every other error. The explanation reads
what jsonargparse parsed (the exception chain, the namespace, the unrecognized arguments), never the
command line or a YAML file as text; to name the file of a misspelt key it loads the ``--config`` files
that were read (YAML) and looks the key up."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import yaml
from jsonargparse import Namespace

from .private import RecordsUnrecognized, unresolved_class_name


def closest(name: str, choices: Iterable[str]) -> list[str]:
    """The choice closest to ``name`` (difflib's ratio at least 0.6, ignoring case: `Adamw` is `AdamW`),
    with any that differ from it only in case; ``[]`` if none is close."""
    by_lower: dict[str, list[str]] = {}
    for choice in dict.fromkeys(choices):  # (once each, in order)
        by_lower.setdefault(choice.lower(), []).append(choice)
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return by_lower[match[0]] if match else []


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


def explain(
    error: BaseException | None, unrecognized: list[str], options: Iterable[str], reading: str | None = None
) -> str | None:
    """One line for a misspelt name, or ``None`` for another error.

    In ``error``'s chain: an :class:`UnknownKey`, or the ``AttributeError`` of a class path whose
    module lacks the name (``acme.models.Classifer``); ``reading`` is the ``--config`` file
    being read. Otherwise the first of ``unrecognized`` (command-line arguments no option took)
    against ``options`` (the parser's option strings)."""
    while error is not None:
        if isinstance(error, UnknownKey):
            where = file_with(error.key, error.files) or reading
            at = f" (in {where})" if where else ""
            return f"unknown key `{error.key}`{at}{did_you_mean(closest(error.key, error.choices))}"
        if isinstance(error, AttributeError) and isinstance(error.obj, ModuleType) and error.name:
            module = error.obj.__name__
            names = [  # (its classes and functions, not its submodules; compared without the module)
                attribute
                for attribute, value in vars(error.obj).items()
                if not attribute.startswith("_") and not isinstance(value, ModuleType)
            ]
            close = did_you_mean([f"{module}.{name}" for name in closest(error.name, names)])
            at = f" (in {reading})" if reading else ""
            return f"`{module}.{error.name}` does not exist{at}{close}"
        if unresolved := unresolved_class_name(error):
            name, bases, paths = unresolved
            kinds = [base.__name__ for base in bases]
            by_name: dict[str, list[str]] = {}  # short name -> class paths (several: a name to avoid)
            for path in paths:
                by_name.setdefault(path.rpartition(".")[2], []).append(path)
            names = [short for short in by_name if short not in kinds]  # (not the base class itself)
            suggested: list[str] = []  # the short name, or its class paths when several classes have it
            for short in closest(name, names):
                suggested += [short] if len(by_name[short]) == 1 else by_name[short]
            close = did_you_mean(suggested)
            at = f" (in {reading})" if reading else ""
            kind = " or ".join(kinds)
            return f"no {kind} subclass is named `{name}`{at}{close or MODULE_PATH}"
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
        """:func:`explain`'s one line, else jsonargparse's message."""
        options = [option for action in self._actions for option in action.option_strings]
        super().error(explain(ex, self.unrecognized, options, self.reading) or message, ex)
