"""The search index on Lance datasets (``pip install 'mcpbridge[lance]'``): a directory locally, S3 with a DynamoDB
commit store on AWS. Only ``bootstrap`` imports it, and only when a deployment chooses that engine."""
