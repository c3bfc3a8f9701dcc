"""The model server: KServe V1 and V2 (REST and gRPC) over versioned model directories.

``python -m trimaran.serving`` (or ``trimaran serve``) runs it; :mod:`trimaran.serving.server` supervises worker
processes, each serving the model from its own event loop (:mod:`trimaran.serving.worker`). Importing this
package imports nothing else, so the control plane can import its siblings cheaply.
"""
