"""The SavedModel that TF Serving runs: the export and its checks (export), the op check that
keeps its graphs servable by TensorFlow's C++ runtime (graph_check), and the serving contract
both the export and the server read (contract). Importing the package imports none of them:
contract is pure Python, which the server reads without starting TensorFlow."""
