"""A CRD schema's ``x-kubernetes-validations``: CEL rules evaluated on a custom resource by
cel-python, with apiextensions' words for a failed rule (``spec: Invalid value: "object":
replicas must not exceed maxReplicas``; ``failed rule: RULE`` without a message).

Kubernetes adds functions of its own to CEL (``lowerAscii``, ``quantity``, ``url``, ``isSorted``, ...);
cel-python has CEL's standard ones only, so a rule whose evaluation fails here (such a function, a
field that is absent) is not enforced rather than refusing what kube-apiserver would accept.
Transition rules (those naming ``oldSelf``) are evaluated on updates, where the old value is there.
"""

from __future__ import annotations

import functools
from typing import Any

from trimaran.api.errors import FieldError, join_path

__all__ = ["has_rules", "rule_definition_errors", "rule_errors"]

_RULES = "x-kubernetes-validations"
_ABSENT = object()


def has_rules(schema: Any) -> bool:
    """Whether ``schema`` has a rule anywhere (so objects of the others never load CEL)."""
    if not isinstance(schema, dict):
        return False
    if schema.get(_RULES):
        return True
    children = [*(schema.get("properties") or {}).values(), schema.get("items"), schema.get("additionalProperties")]
    return any(has_rules(child) for child in children)


@functools.cache
def _environment() -> Any:
    import celpy  # a third of a second: only CRDs with rules pay it

    return celpy.Environment()


@functools.lru_cache(maxsize=1024)
def _program(rule: str) -> Any:
    environment = _environment()
    return environment.program(environment.compile(rule))


def rule_definition_errors(rules: Any, path: str) -> list[FieldError]:
    """What is wrong with a schema's rules themselves: each needs a ``rule`` that parses."""
    import celpy

    if not isinstance(rules, list):
        return [FieldError.invalid(path, rules, "must be a list of rules")]
    errs: list[FieldError] = []
    for i, rule in enumerate(rules):
        where = join_path(path, i)
        text = rule.get("rule") if isinstance(rule, dict) else None
        if not isinstance(text, str) or not text.strip():
            errs.append(FieldError.required(f"{where}.rule"))
            continue
        try:
            _program(text)
        except celpy.CELParseError as exc:
            errs.append(FieldError.invalid(f"{where}.rule", text, f"compilation failed: {exc.args[0]}"))
        reason = rule.get("reason")
        if reason is not None and reason not in ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
                                                 "FieldValueDuplicate"):
            errs.append(FieldError.not_supported(f"{where}.reason", reason, ["FieldValueInvalid",
                                                 "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"]))
    return errs


def _evaluate(rule: str, this: Any, old: Any) -> bool | str | None:
    """The rule's result (a boolean, or a message expression's string), or None where it cannot be
    evaluated here."""
    import celpy
    from celpy import celtypes

    try:
        activation = {"self": celpy.json_to_cel(this)}
        if old is not _ABSENT:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = _program(rule).evaluate(activation)
    except (celpy.CELEvalError, celpy.CELParseError, TypeError, ValueError, KeyError):
        return None
    if isinstance(result, (celtypes.BoolType, bool)):
        return bool(result)
    return str(result) if isinstance(result, str) else None  # StringType, or a plain str from a concatenation


def _failure(rule: dict[str, Any], this: Any, old: Any, path: str, kind: str) -> FieldError:
    message = str(rule.get("message") or "").strip() or f"failed rule: {rule['rule'].strip()}"
    expression = rule.get("messageExpression")
    if isinstance(expression, str) and expression.strip():
        shown = _evaluate(expression, this, old)
        if isinstance(shown, str) and shown.strip():
            message = shown.strip()
    field = path
    if rule.get("fieldPath"):  # ".spec.replicas", relative to where the rule is
        field = str(rule["fieldPath"]).lstrip(".") if path == "<nil>" else path + str(rule["fieldPath"])
    reason = rule.get("reason")
    if reason == "FieldValueForbidden":
        return FieldError.forbidden(field, message)
    if reason == "FieldValueRequired":
        return FieldError.required(field, message)
    if reason == "FieldValueDuplicate":
        return FieldError.duplicate(field, kind)
    return FieldError.invalid(field, kind, message)


def rule_errors(value: Any, schema: Any, path: str, old: Any = _ABSENT, transitions_only: bool = False
                ) -> list[FieldError]:
    """The rules of ``schema`` and of every schema below it that ``value`` breaks. With ``old`` (an
    update), transition rules too, where the old object has the same field; ``transitions_only``
    leaves out the rest (checked already on the new object alone)."""
    if not isinstance(schema, dict) or value is None:
        return []
    errs: list[FieldError] = []
    label = path or "<nil>"
    for rule in schema.get(_RULES) or []:
        text = rule.get("rule") if isinstance(rule, dict) else None
        if not isinstance(text, str):
            continue
        transition = "oldSelf" in text
        if (transition and old is _ABSENT) or (transitions_only and not transition):
            continue
        if _evaluate(text, value, old if transition else _ABSENT) is False:
            errs.append(_failure(rule, value, old, label, str(schema.get("type") or "object")))
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            before = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
            if sub is not None:
                errs.extend(rule_errors(item, sub, join_path(path, key), before, transitions_only))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            # Items are not matched to old ones (that needs x-kubernetes-list-type map keys).
            errs.extend(rule_errors(item, schema["items"], join_path(path, i), _ABSENT, transitions_only))
    return errs
