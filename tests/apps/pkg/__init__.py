"""A package, to check ``pkg.module:attr.attr`` import strings."""
