"""How each record kind shows on the pages, one module a kind, beside the contract.

`kind_rendering` says what a rendering is made of (a description, compare lanes, a chain role);
each `<kind>_rendering` module defines one kind's, and `records.contract.kinds` registers it in
the kind's KindSpec, the one table the pages loop over.
"""
