"""The GPU path: a thin cuda-python device layer. Imports cuda-python only when first used."""
