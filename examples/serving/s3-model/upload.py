"""Train a small iris classifier and put it in an S3 bucket (moto's server, MinIO or AWS).

    python examples/serving/s3-model/upload.py --endpoint http://127.0.0.1:5000
"""

from __future__ import annotations

import argparse
import io

import boto3
import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:5000", help="the S3 server ('' for AWS itself)")
    parser.add_argument("--bucket", default="models")
    parser.add_argument("--key", default="sklearn/iris/model.joblib")
    parser.add_argument("--access-key", default="AKIAEXAMPLEKEY")
    parser.add_argument("--secret-key", default="example-secret-key")
    args = parser.parse_args()
    x, y = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=500).fit(x, y)
    buf = io.BytesIO()
    joblib.dump(model, buf)
    s3 = boto3.session.Session(aws_access_key_id=args.access_key, aws_secret_access_key=args.secret_key,
                               region_name="us-east-1").client("s3", endpoint_url=args.endpoint or None)
    existing = [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
    if args.bucket not in existing:
        s3.create_bucket(Bucket=args.bucket)
    s3.put_object(Bucket=args.bucket, Key=args.key, Body=buf.getvalue())
    print(f"uploaded s3://{args.bucket}/{args.key} ({len(buf.getvalue())} bytes)")


if __name__ == "__main__":
    main()
