"""The Lambda asset: thin handlers and the visibility lease engine they share.

Nothing here imports moto or pyspark: this folder ships to Lambda as it is, with Powertools
coming from its public layer and boto3 from the runtime.
"""
