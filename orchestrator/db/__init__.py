"""The only package that touches SQLAlchemy: models, sessions, migrations, CRUD."""
