"""What each Glue version (and EMR Serverless release) runs a job with: its Python, and the modules a job
may import without shipping them.

`cdk synth` refuses a job whose code imports a module that is neither shipped with it (its `code` folder,
its `requirements`) nor here (`longjobs.construct.job_code`). The lists are AWS's "Python modules already
provided in AWS Glue" for each version
(https://docs.aws.amazon.com/glue/latest/dg/aws-glue-programming-python-libraries.html#glue-modules-provided),
as import names: a distribution such as `python-dateutil` is imported as `dateutil`. Beside them: the
standard library of the version's Python, Spark's own Python (`pyspark`, `py4j`), Glue's `awsglue`, and
this project's `longjobs.pipeline`, which every job ships. An EMR Serverless release provides the standard
library and Spark only: its image's other packages are not a documented list, so a job ships what it uses.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

GLUE_5_0_PROVIDED = frozenset(
    {
        # aiobotocore 2.13.1, aiohappyeyeballs 2.3.5, aiohttp 3.10.1, aioitertools 0.11.0, aiosignal 1.3.1
        *("aiobotocore", "aiohappyeyeballs", "aiohttp", "aioitertools", "aiosignal"),
        # appdirs 1.4.4, attrs 24.2.0, boto3 1.34.131, botocore 1.34.131, certifi 2024.7.4
        *("appdirs", "attr", "attrs", "boto3", "botocore", "certifi"),
        # charset-normalizer 3.3.2, contourpy 1.2.1, cycler 0.12.1, fonttools 4.53.1, frozenlist 1.4.1
        *("charset_normalizer", "contourpy", "cycler", "fontTools", "frozenlist"),
        # fsspec 2024.6.1, idna 2.10, jmespath 0.10.0, kaleido 0.2.1, kiwisolver 1.4.5, matplotlib 3.9.0
        *("fsspec", "idna", "jmespath", "kaleido", "kiwisolver", "matplotlib", "mpl_toolkits", "pylab"),
        # multidict 6.0.5, numpy 1.26.4, packaging 24.1, pandas 2.2.2, pillow 10.4.0, pip 23.0.1
        *("multidict", "numpy", "packaging", "pandas", "PIL", "pip"),
        # plotly 5.23.0, pyarrow 17.0.0, pyparsing 3.1.2, python-dateutil 2.9.0.post0, pytz 2024.1
        *("plotly", "_plotly_utils", "pyarrow", "pyparsing", "dateutil", "pytz"),
        # requests 2.32.2, s3fs 2024.6.1, s3transfer 0.10.2, seaborn 0.13.2, setuptools 59.6.0, six 1.16.0
        *("requests", "s3fs", "s3transfer", "seaborn", "setuptools", "pkg_resources", "six"),
        # tenacity 9.0.0, tzdata 2024.1, urllib3 1.25.10, virtualenv 20.4.0, wrapt 1.16.0, yarl 1.9.4
        *("tenacity", "tzdata", "urllib3", "virtualenv", "wrapt", "yarl"),
    }
)
GLUE_5_1_PROVIDED = GLUE_5_0_PROVIDED | frozenset(
    {
        # choreographer, distlib, filelock, iniconfig, logistro, narwhals, orjson, platformdirs, pluggy,
        # propcache, Pygments, pytest, pytest-timeout, simplejson, typing_extensions, uv
        *("choreographer", "distlib", "filelock", "iniconfig", "logistro", "narwhals", "orjson", "platformdirs"),
        *("pluggy", "propcache", "pygments", "pytest", "_pytest", "pytest_timeout", "simplejson"),
        *("typing_extensions", "uv"),
    }
)
GLUE_6_0_PROVIDED = GLUE_5_1_PROVIDED | frozenset(
    {
        # googleapis-common-protos and protobuf (google), grpcio (grpc), grpcio-status, PyYAML (yaml), zstandard
        *("google", "grpc", "grpc_status", "yaml", "zstandard"),
    }
)
"""Glue 6.0's list is its `base-requirements.txt` (awslabs/aws-glue-libs, the branch for 6.0), which AWS's
page on Python virtual environments links for 6.0."""
SPARK = frozenset({"pyspark", "py4j"})
SPARK_AND_GLUE = SPARK | {"awsglue"}

REMOVED_AFTER_3_11 = frozenset(
    {
        # PEP 594's dead batteries (removed in 3.13) and distutils, imp, asynchat, asyncore, smtpd (3.12):
        # still in Glue 5.x's Python 3.11, gone from the 3.13 that runs `cdk synth`.
        *("aifc", "audioop", "cgi", "cgitb", "chunk", "crypt", "imghdr", "mailcap", "msilib", "nis", "nntplib"),
        *("ossaudiodev", "pipes", "sndhdr", "spwd", "sunau", "telnetlib", "uu", "xdrlib", "lib2to3"),
        *("distutils", "imp", "asynchat", "asyncore", "smtpd"),
    }
)


@dataclass(frozen=True)
class GlueRuntime:
    """One Glue version's (or EMR Serverless release's) Python and the top-level modules its jobs may import
    unshipped."""

    version: str
    python: str
    provided: frozenset[str]
    platform: str = "Glue"
    spark: frozenset[str] = SPARK_AND_GLUE

    @property
    def name(self) -> str:
        """How messages name it: `Glue 6.0`, `EMR Serverless emr-spark-8.0.0`."""
        return f"{self.platform} {self.version}"

    @property
    def python_tag(self) -> str:
        """`311` for Python 3.11: what `pip download --python-version` takes."""
        return self.python.replace(".", "")

    def importable(self, module: str) -> bool:
        """Whether `module` (dotted) is there on Glue without shipping it."""
        top = module.split(".")[0]
        if top == "longjobs":
            return module in ("longjobs", "longjobs.pipeline") or module.startswith("longjobs.pipeline.")
        stdlib = set(sys.stdlib_module_names) | (REMOVED_AFTER_3_11 if self.python == "3.11" else set())
        return top in stdlib or top in self.spark or top in self.provided


GLUE_RUNTIMES = {
    "5.0": GlueRuntime("5.0", "3.11", GLUE_5_0_PROVIDED),
    "5.1": GlueRuntime("5.1", "3.11", GLUE_5_1_PROVIDED),
    "6.0": GlueRuntime("6.0", "3.13", GLUE_6_0_PROVIDED),
}

EMR_RUNTIMES = {
    # AWS runtime for Apache Spark 8.0.0: Spark 4.0.2, Python 3.11 and later
    # (https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/release-version-emr-spark-8.0.0.html)
    "emr-spark-8.0.0": GlueRuntime("emr-spark-8.0.0", "3.11", frozenset(), "EMR Serverless", SPARK),
}
"""The EMR Serverless releases a type may run on. Their Python is checked as 3.11, the oldest the release
documents, as Glue 5.x code is."""
