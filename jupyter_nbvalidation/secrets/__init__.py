"""Secrets by name (issue 45): what ``c.NBValidation.secrets`` names, who may use it, and its values
(docs/secrets.md)."""
