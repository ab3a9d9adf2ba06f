"""The scalar-function compiler: Python source -> IR -> forward-mode transform -> kernels.

A pure bottom layer: it knows nothing of tapes or Tensors and imports only its own modules and
`minflux.backend`, `minflux.files` and `minflux._version`. `compiled.compiled(fn)` is the entry
point; the tape side of elementwise work lives in `minflux.pointwise`.
"""
