//! weft-load
