"""Single sign-on with OpenID Connect (docs/access.md#single-sign-on), on mozilla-django-oidc.

`provider` finds the provider's endpoints, `backends` judges a sign-in (the ID token, the
e-mail, the account), `memberships` writes the roles the group claim gives, `forms` keeps
password login off when it is turned off, `views` are the login page and the sign-in's two ends,
`refusals` the answer to a sign-in refused. Configured by config.oidc from the environment.
"""
