"""Client quotas as Apache Kafka has them (ClientQuotaControlManager, ClientQuotasImage,
ClientQuotaManager, ControllerMutationQuotaManager): the entities and their values
(`configs`), the measures the throttling takes (`rates`), one quota key's throttling
(`quota_manager`) and the broker's quotas as the server and the handlers use them
(`client_quotas`); each imports only those named before it.
"""
