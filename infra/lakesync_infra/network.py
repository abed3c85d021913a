"""The materialise function's network when it runs in a VPC (``materialiseVpc``): the imported VPC and, optionally,
the VPC endpoints it needs to reach AWS from private subnets.

The VPC, its subnets and security groups are imported from the configured ids (``ec2.Vpc.from_vpc_attributes``),
never looked up: the synth stays offline. A function in private subnets has no internet; what it calls, and how:

* DynamoDB (the config table) and S3 (claim-check payloads): **gateway endpoints**, routes in the subnets' route
  tables (free), each route table named once however many subnets share it (one NAT gateway's layout: one private
  route table for every zone). They apply to every workload in those subnets, with the default full-access policy, so
  other workloads keep working -- only their S3/DynamoDB traffic no longer goes through a NAT.
* Secrets Manager (the destinations' and connectors' secrets): an **interface endpoint** in the subnets with private
  DNS (billed per AZ-hour), behind a security group that admits HTTPS from the function's security groups only.
* Not needed: KMS -- no function calls it: S3, DynamoDB and Secrets Manager decrypt with the customer key on the service
  side (the caller needs ``kms:Decrypt`` on the key, not a route to KMS); SQS -- the Lambda service polls the queue and
  deletes the messages (the event source mapping), the function never calls it; CloudWatch Logs -- the Lambda service
  ships the function's output, and Powertools' metrics are log lines (EMF); X-Ray -- the function's SDK sends segments
  over UDP to the daemon Lambda runs beside it, which the Lambda service connects, like the logs. Tracing therefore
  stays active in the VPC.

**Connector functions** (``connectorFunctions``: ``connector_poll``, ``pull``, ``actions``) may join it, in the same
subnets and security groups, to reach connector sources inside the VPC (RDS, Aurora, a database on EC2). They call
the same services -- DynamoDB, S3 (``pull``'s checkpoints), Secrets Manager (connector secrets, the JWT secret) --
so the endpoints serve them too; EventBridge Scheduler invokes the poller from outside (no endpoint). A connector of
an internet API (Jira, Salesforce) in a function placed here needs a NAT gateway in the VPC: the stack creates none.

With ``createEndpoints: false`` nothing is created: the VPC must already route those three services (endpoints or a
NAT gateway). Create them here only if the VPC has none: a second S3 or DynamoDB gateway endpoint on the same
route table, or a second private-DNS interface endpoint for the same service in the VPC, fails the deployment.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from lakesync_infra.config import MaterialiseVpc

GATEWAY_ENDPOINTS: Final = {
    "S3": ec2.GatewayVpcEndpointAwsService.S3,
    "DynamoDb": ec2.GatewayVpcEndpointAwsService.DYNAMODB,
}
INTERFACE_ENDPOINTS: Final = {
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
}
HTTPS: Final = 443


class MaterialiseNetwork(Construct):
    """The imported VPC of the materialise function (and of the configured connector functions) and the endpoints
    they need.

    Attributes:
        functions: The functions placed in the VPC (``materialise`` first).
        vpc: The imported VPC.
        subnets: The function's subnets.
        security_groups: The function's (imported) security groups.
        endpoint_security_group: Guards the interface endpoints (``None`` without endpoints).
        endpoints: Created endpoints by service name (empty with ``createEndpoints: false``).
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: MaterialiseVpc) -> None:
        super().__init__(scope, construct_id)
        self.functions = settings.functions
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=settings.vpc_id,
            availability_zones=list(settings.availability_zones),
            private_subnet_ids=list(settings.private_subnet_ids),
            private_subnet_route_table_ids=list(settings.private_subnet_route_table_ids) or None,
        )
        self.subnets = ec2.SubnetSelection(subnets=self.vpc.private_subnets)
        self.security_groups = [
            ec2.SecurityGroup.from_security_group_id(self, f"FunctionGroup{i}", group, mutable=False)
            for i, group in enumerate(settings.security_group_ids)
        ]
        self.endpoints: dict[str, ec2.IVpcEndpoint] = {}
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        if not settings.create_endpoints:
            return
        for name, gateway_service in GATEWAY_ENDPOINTS.items():
            self.endpoints[name] = ec2.GatewayVpcEndpoint(
                self, f"{name}Endpoint", vpc=self.vpc, service=gateway_service, subnets=[self.subnets]
            )
        group = ec2.SecurityGroup(
            self,
            "EndpointGroup",
            vpc=self.vpc,
            description="LakeSync materialise: HTTPS from the function to its interface endpoints",
            allow_all_outbound=False,
        )
        for source in self.security_groups:
            group.add_ingress_rule(
                ec2.Peer.security_group_id(source.security_group_id),
                ec2.Port.tcp(HTTPS),
                "HTTPS from the materialise function",
            )
        self.endpoint_security_group = group
        for name, interface_service in INTERFACE_ENDPOINTS.items():
            self.endpoints[name] = ec2.InterfaceVpcEndpoint(
                self,
                f"{name}Endpoint",
                vpc=self.vpc,
                service=interface_service,
                subnets=self.subnets,
                security_groups=[group],
                open=False,
                private_dns_enabled=True,
            )
