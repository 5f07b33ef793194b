//! The backend conformance suite against llama.cpp and the real SmolLM2 model.

mod common;

wick_backend::backend_conformance!(common::backend);
