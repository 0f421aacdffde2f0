"""Keras layers, one concept each (attention, pointer, encoder, decoder cell)."""
