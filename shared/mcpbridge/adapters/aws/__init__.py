"""AWS adapters: DynamoDB, KMS (and later S3, Step Functions, Bedrock)."""
