"""Test doubles shipped with the library, for the tests and for benchmarks run from an installed
package: a scripted OpenAI-compatible model server (``scripted_model``)."""
