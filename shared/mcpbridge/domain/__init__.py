"""Pure models and rules: ids, key and token formats, the store vocabulary. No I/O and no framework imports."""
