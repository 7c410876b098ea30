"""The events pipeline: raw JSON-lines events of one date in, curated Parquet and a summary out.

`params` validates a job's parameters without Spark, `job.run` is the pipeline, `glue_job` the Glue
script and `generate` the test-data generator. Importing this package imports no Spark, so the
parameters of a job can be checked where Spark is not installed.
"""
