"""Prepares a freshly started moto S3 server for tests/cache/remote_s3_test.cpp, in the first
actions the server lets through unauthenticated (INITIAL_NO_AUTH_ACTION_COUNT), and prints the
credentials the tests then sign with.

usage: s3_setup.py ENDPOINT BUCKET user   -> prints "ACCESS_KEY SECRET_KEY" (an IAM user allowed
                                             everything; the bucket is made with its keys)
       s3_setup.py ENDPOINT BUCKET role   -> prints the role's ARN (a role allowed everything, to be
                                             assumed with a web-identity token; the bucket is made
                                             unauthenticated, so the next free action is STS's)
       s3_setup.py ENDPOINT BUCKET roles  -> prints "ACCESS_KEY SECRET_KEY" of a publisher, then of
                                             a reader on a second line (7 free actions: 6 IAM
                                             calls and the bucket). The policies are
                                             docs/SECURITY-roles.md's, for tests/cache/remote_roles_test.cpp.
"""
import json
import sys

import boto3

endpoint, bucket, mode = sys.argv[1:4]
anyone = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **anyone)
everything = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
if mode == "user":
    iam.create_user(UserName="kiln")
    key = iam.create_access_key(UserName="kiln")["AccessKey"]
    iam.put_user_policy(UserName="kiln", PolicyName="all", PolicyDocument=everything)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key["AccessKeyId"],
                      aws_secret_access_key=key["SecretAccessKey"])
    s3.create_bucket(Bucket=bucket)
    print(key["AccessKeyId"], key["SecretAccessKey"])
elif mode == "roles":
    # Server-side roles: the reader's credentials may read (GetObject, and ListBucket so that an
    # object that is not there is a 404, not a 403) but not write; the publisher's may also write.
    def policy(actions):
        return json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": [a for a in actions if a != "s3:ListBucket"], "Resource": f"arn:aws:s3:::{bucket}/*"},
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": f"arn:aws:s3:::{bucket}"}]})
    keys = {}
    for user in ("publisher", "reader"):
        iam.create_user(UserName=user)
        keys[user] = iam.create_access_key(UserName=user)["AccessKey"]
    iam.put_user_policy(UserName="publisher", PolicyName="kiln-publisher",
                        PolicyDocument=policy(["s3:GetObject", "s3:PutObject", "s3:ListBucket"]))
    iam.put_user_policy(UserName="reader", PolicyName="kiln-reader", PolicyDocument=policy(["s3:GetObject", "s3:ListBucket"]))
    # The bucket is an administrator's to make: here the one unauthenticated action left over.
    boto3.client("s3", **anyone).create_bucket(Bucket=bucket)
    for user in ("publisher", "reader"):
        print(keys[user]["AccessKeyId"], keys[user]["SecretAccessKey"])
else:
    trust = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Federated": "kiln-test"}, "Action": "sts:AssumeRoleWithWebIdentity"}]})
    role = iam.create_role(RoleName="kiln", AssumeRolePolicyDocument=trust)["Role"]
    iam.put_role_policy(RoleName="kiln", PolicyName="all", PolicyDocument=everything)
    boto3.client("s3", **anyone).create_bucket(Bucket=bucket)
    print(role["Arn"])
