"""The shipped default dataset: a simulated multi-agent, multi-client team memory.

Five agents (``claude-code``, ``support-bot``, ``ops-agent``, ``sales-agent``,
``consolidation-engine``) write events, facts, decisions and statuses for several clients (plus
``global``) over about six months. Woven into the background noise are scenarios built to
exercise one retrieval path each; every query carries exactly one primary tag naming the path:

``paraphrase``   dense retrieval: the query shares almost no word with the memory, and a decoy
                 memory shares many words with the query but means something else.
``exact-id``     BM25: ids such as ``INC-48213``, ``INV-2025-0412`` or figures like
                 ``$12,437`` among near-identical memories that differ only in the id.
``multi-hop``    graph / LIF: the query names entity A, the relevant memory mentions only B,
                 A and B are linked by a ``relate`` op and/or co-occur in another memory.
``supersession`` facts updated by key: relevant = current version, stale = older ones.
``status``       statuses updated by subject: relevant = latest, stale = earlier ones.
``temporal``     ``at_time`` in the past: relevant = the version valid then.
``ttl``          an old low/medium event nobody touched (stale) next to a high-importance
                 memory on the same topic (relevant).
``dedup``        the same text written again by the same or other agents; relevant = first id.
``scope``        near-identical memories of other clients (stale); leakage is measurable.
``credential``   the memory carries a secret; the answer must not.

Randomness comes only from ``random.Random(seed)`` and no wall-clock time is read, so a seed
always produces byte-identical files.
"""

from __future__ import annotations

import os
import random
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memlab.datasets.format import Dataset, MemoryOp, Query, write_dataset
from memlab.timeutil import SECONDS_PER_DAY, parse_ts

AGENTS: tuple[str, ...] = (
    "claude-code",
    "support-bot",
    "ops-agent",
    "sales-agent",
    "consolidation-engine",
)
PRIMARY_TAGS: tuple[str, ...] = (
    "paraphrase",
    "exact-id",
    "multi-hop",
    "supersession",
    "status",
    "temporal",
    "ttl",
    "dedup",
    "scope",
    "credential",
)
_CATEGORY_OF_TYPE = {
    "event": "episodic",
    "fact": "semantic",
    "decision": "procedural",
    "status": "episodic",
}


@dataclass(frozen=True, slots=True)
class ClientProfile:
    """One simulated client and the entity names its memories use."""

    id: str
    display: str
    domain: str
    partner_domain: str
    brand_site: str
    product: str
    services: tuple[str, str]
    hidden_service: str
    project: str
    queue_tech: str
    stack: tuple[str, ...]
    contact: str
    engineer: str
    competitor: str
    sub_product: str
    liaison: str
    microsite: str
    division: str
    worker: str

    def slots(self) -> dict[str, str]:
        """Template fields of this client."""
        return {
            "cid": self.id,
            "display": self.display,
            "domain": self.domain,
            "partner": self.partner_domain,
            "brand": self.brand_site,
            "product": self.product,
            "svc": self.services[0],
            "svc2": self.services[1],
            "hidden": self.hidden_service,
            "project": self.project,
            "tech": self.queue_tech,
            "contact": self.contact,
            "engineer": self.engineer,
            "competitor": self.competitor,
            "subproduct": self.sub_product,
            "liaison": self.liaison,
            "microsite": self.microsite,
            "division": self.division,
            "worker": self.worker,
        }


CLIENT_PROFILES: tuple[ClientProfile, ...] = (
    ClientProfile(
        "acme-corp", "Acme Corp", "acme-corp.com", "acme-outlet.com", "acme-rewards.com",
        "Orion Dashboard", ("billing-api", "order-sync"), "metrics-gateway", "checkout-v2",
        "RabbitMQ", ("Next.js", "PostgreSQL", "Vercel"), "Dana Whitfield", "Priya Raman",
        "Vandelay Industries", "Orion Pulse", "Rosa Delgado", "acme-deals.com",
        "Acme Retail", "invoice-worker",
    ),
    ClientProfile(
        "globex", "Globex Group", "globex.io", "globex-partners.io", "globex-careers.io",
        "Helios Portal", ("claims-engine", "partner-feed"), "quote-cache", "claims-v3",
        "Kafka", ("Django", "MySQL", "AWS"), "Marcus Oyelaran", "Kenji Watanabe",
        "Initrode Systems", "Helios Lens", "Yusuf Demir", "globex-quotes.io",
        "Globex Insurance", "claims-batcher",
    ),
    ClientProfile(
        "initech", "Initech Software", "initech.ca", "initech-partners.ca", "initech-events.ca",
        "Tundra Planner", ("tps-reports", "ledger-sync"), "export-worker", "payroll-bridge",
        "Elasticsearch", ("Ruby on Rails", "PostgreSQL", "Heroku"), "Samira Haddad",
        "Oskar Lindqvist", "Chotchkie Labs", "Tundra Ledger", "Clara Jensen", "initech-store.ca",
        "Initech Payroll", "tps-scheduler",
    ),
    ClientProfile(
        "umbrella-health", "Umbrella Health", "umbrellahealth.com", "umbrella-pharmacy.com",
        "umbrella-clinics.com", "Caduceus Scheduler", ("records-api", "intake-forms"),
        "consent-store", "triage-bot", "MongoDB", ("Spring Boot", "Kubernetes", "Azure"),
        "Helen Okafor", "Rafael Costa", "Wellspring Medical", "Caduceus Kiosk", "Arjun Mehta",
        "umbrella-labs.com", "Umbrella Pharmacy", "fax-ingest",
    ),
    ClientProfile(
        "stark-logistics", "Stark Logistics", "starklogistics.io", "stark-customs.io",
        "stark-freight.io", "Atlas Fleet Tracker", ("route-planner", "dock-scheduler"),
        "eta-predictor", "yard-mapper", "ClickHouse", ("Python", "PostgreSQL", "GCP"),
        "Tomas Varga", "Aiko Tanaka", "Hammer Freight", "Atlas Beacon", "Freya Nilsson",
        "stark-tracking.io", "Stark Freight", "manifest-worker",
    ),
    ClientProfile(
        "wayne-media", "Wayne Media", "waynemedia.com", "wayne-syndication.com",
        "wayne-podcasts.com", "Gotham Newsroom", ("cms-api", "paywall-service"),
        "feed-renderer", "comments-v2", "DynamoDB", ("WordPress", "Cloudflare", "MySQL"),
        "Lucia Fox", "Ben Mwangi", "Metropolis Press", "Gotham Replay", "Mateo Rossi",
        "wayne-archive.com", "Wayne Podcasts", "transcoder",
    ),
    ClientProfile(
        "hooli", "Hooli Labs", "hooli.com", "hooli-partners.com", "hooli-xyz.com",
        "Nucleus Search", ("compress-api", "signal-hub"), "ranker-shadow", "box-sync",
        "BigQuery", ("Kotlin", "GCP", "Datadog"), "Nadia Petrov", "Luis Moreno",
        "Pied Piper Networks", "Nucleus Spark", "Leila Karimi", "hooli-cloud.com",
        "Hooli Search", "index-builder",
    ),
    ClientProfile(
        "soylent", "Soylent Foods", "soylentfoods.com", "soylent-wholesale.com",
        "soylent-kitchen.com", "Harvest Ordering", ("menu-sync", "loyalty-api"), "price-feed",
        "meal-planner", "Airflow", ("Shopify", "Node.js", "Stripe"), "Grace Adeyemi",
        "Tobias Klein", "Nutrico Brands", "Harvest Pantry", "Hugo Lambert",
        "soylent-recipes.com", "Soylent Kitchens", "order-batcher",
    ),
)  # fmt: skip

# --------------------------------------------------------------------------- scenario content
# paraphrase: (slug, memory, query, decoy, memory type, scope)
PARAPHRASE: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("checkout-timeouts",
     "Cart abandonment jumped because the card entry form times out after twenty seconds on "
     "handsets.",
     "Why are shoppers quitting before they finish buying on their phones?",
     "Shoppers can now finish buying gift cards by phone through the call centre.",
     "event", "client"),
    ("export-stalls",
     "The nightly export to the warehouse stalls whenever the VPN tunnel renegotiates keys.",
     "What makes the overnight data dump to storage freeze up?",
     "Storage for the marketing data dump was moved to a cheaper tier overnight.",
     "fact", "client"),
    ("newsletter-footer",
     "Legal insists every outbound newsletter include a physical mailing address in the footer.",
     "What do the lawyers require at the bottom of email campaigns?",
     "The lawyers asked us to require email confirmation at the bottom of the signup funnel.",
     "decision", "client"),
    ("onboarding-overrun",
     "Onboarding calls run long because new accounts lack admin rights to invite colleagues.",
     "Why do kickoff meetings with fresh customers overrun?",
     "Fresh customers receive a welcome kit; kickoff meetings are booked by the sales team.",
     "event", "client"),
    ("search-stemming",
     "Search relevance dropped after the analyzer stopped stemming plural nouns.",
     "Why did finding things through the lookup box get worse?",
     "The lookup box on the help centre now suggests things as you type, so finding articles "
     "is quicker.",
     "event", "client"),
    ("mobile-crashes",
     "Mobile crash rate doubled once the image library started decoding on the main thread.",
     "What made the phone app fall over so often?",
     "The phone app team will fall back to weekly releases so the app ships less often.",
     "event", "client"),
    ("invoice-bounces",
     "Invoices bounce because the finance mailbox rejects attachments over ten megabytes.",
     "Why are bills not reaching the accounting inbox?",
     "Bills for the accounting team's software licences are now reaching us quarterly.",
     "fact", "client"),
    ("churn-reason",
     "Churned subscribers mostly cite the price increase introduced in the spring tier change.",
     "What reason do cancelled members give for leaving?",
     "Cancelled members can give feedback before leaving via the exit survey.",
     "fact", "client"),
    ("slow-australia",
     "Page loads crawl for visitors in Australia since assets are served from a single "
     "European region.",
     "Why is the website sluggish for people down under?",
     "People down under asked whether the website could show prices in local currency.",
     "event", "client"),
    ("intern-merges",
     "Interns may not push to the main branch without a reviewer's approval.",
     "Can trainees merge code directly into production source?",
     "Trainees will merge their onboarding notes directly into the production handbook.",
     "decision", "global"),
    ("refund-mondays",
     "Refund requests spike every Monday after weekend flash sales.",
     "When do customers most often ask for their money back?",
     "Customers often ask where to send money for back orders.",
     "fact", "client"),
    ("staging-reset",
     "The staging database is wiped and reseeded every Sunday at midnight.",
     "How often does the test environment's data get reset?",
     "Test environment access gets reset for contractors whose data agreements expire.",
     "fact", "client"),
    ("translation-lead",
     "Translators need at least five working days to localise a product launch page.",
     "How much lead time should language adaptation of release announcements get?",
     "Release announcements should get a short lead paragraph and a time-boxed language "
     "review.",
     "decision", "global"),
    ("dispute-escalation",
     "Support agents escalate billing disputes above five hundred dollars to the finance lead.",
     "Who handles large payment disagreements from clients?",
     "Clients with large payment batches are routed to the treasury queue.",
     "decision", "client"),
    ("scanner-dropouts",
     "Warehouse scanners lose connectivity near the cold storage aisle.",
     "Where do the barcode readers drop off the wireless network?",
     "Barcode readers for the new wireless network were dropped off at the front desk.",
     "event", "client"),
    ("annual-report",
     "Marketing wants the annual report released before the investor meeting on the twelfth.",
     "What is the deadline for publishing the yearly results document?",
     "Publishing the yearly holiday schedule document has no deadline.",
     "decision", "client"),
    ("sso-resets",
     "Password resets fail for accounts created through the partner single sign-on flow.",
     "Why can't some users recover their login credentials?",
     "Users can recover deleted files from the login screen's trash folder.",
     "event", "client"),
    ("evening-video",
     "Video calls stutter because the office router throttles uploads after six pm.",
     "Why is conferencing choppy in the evenings?",
     "Conferencing rooms are booked in the evenings for the choir; choppy acoustics noted.",
     "event", "client"),
    ("canada-tax",
     "Tax rates for Canadian provinces are hard-coded in the checkout module.",
     "Where do the sales levy percentages for regions up north live?",
     "Sales reps for regions up north live close to the distribution centre.",
     "fact", "client"),
    ("quarter-freeze",
     "Engineers agreed to freeze feature work during the last week of each quarter.",
     "When is development of new capabilities paused?",
     "Development of new office capabilities was paused by facilities.",
     "decision", "global"),
    ("chatbot-stiff",
     "Chatbot answers sound robotic because replies are capped at forty tokens.",
     "Why does the virtual assistant come across as stiff?",
     "Stiff competition means the virtual assistant market is crowded; several come across "
     "our desk.",
     "event", "client"),
    ("blank-labels",
     "Shipping labels print blank when the thermal printer driver updates overnight.",
     "Why do parcel stickers come out empty?",
     "Parcel stickers with the new logo come out next month; the empty stock was recycled.",
     "event", "client"),
    ("survey-speed",
     "The quarterly survey showed respondents value quick replies over polished wording.",
     "What do clients care about more, speed of response or nice phrasing?",
     "Clients care about phrasing in contracts, and legal wants speed on every response.",
     "fact", "client"),
    ("photo-turnaround",
     "Photographers must deliver raw files alongside edited images within forty-eight hours.",
     "What's the turnaround for picture shoots, including unprocessed originals?",
     "Picture frames for the office were ordered; turnaround on originals from the print shop "
     "is slow.",
     "decision", "client"),
    ("backup-key",
     "Backups are encrypted with a key held by the security officer, not the operations team.",
     "Who controls the secret that protects our archived copies?",
     "Archived copies of the brand guide sit on the shared drive; nothing secret there and "
     "anyone controls them.",
     "decision", "global"),
    ("webinar-conversion",
     "Sign-ups from the webinar convert at triple the rate of paid ads.",
     "Which channel brings registrations that turn into customers most effectively?",
     "Registrations for the customer advisory channel close Friday; turn in forms effectively "
     "by noon.",
     "fact", "client"),
    ("dock-checkin",
     "Drivers skip the loading dock check-in when the tablet battery dies.",
     "Why do truckers miss registering their arrival at the bay?",
     "Truckers registering for the bay area safety course will arrive at nine.",
     "event", "client"),
    ("headline-length",
     "Editors prefer headlines under sixty characters for social previews.",
     "How long should titles be so they aren't cut off when shared online?",
     "Titles shared online are cut off from the archive after a year; how long is "
     "configurable.",
     "fact", "client"),
    ("vendor-renewal",
     "The vendor contract auto-renews unless cancelled ninety days before expiry.",
     "How much notice do we need to give to stop the supplier agreement rolling over?",
     "The supplier agreement template needs notice fields; stop rolling out the old one.",
     "fact", "client"),
    ("dashboard-lag",
     "Dashboard tiles show yesterday's figures because the aggregation job runs at dawn.",
     "Why are the charts on the overview screen a day behind?",
     "Charts on the overview screen can be exported; a day later they appear behind the "
     "login.",
     "fact", "client"),
    ("laptop-handout",
     "New hires receive laptops only after their background check clears.",
     "When do recruits get their computers?",
     "Recruits asked when they get to bring their own computers to the hackathon.",
     "decision", "global"),
    ("contrast-audit",
     "Accessibility audit flagged low contrast on grey placeholder text in forms.",
     "What did the review for users with impaired vision find wrong?",
     "Users with impaired hearing can request a review of captions; find the request in "
     "settings.",
     "event", "client"),
    ("holiday-rota",
     "Holiday coverage rota puts two people on call between Christmas and New Year.",
     "How many staff are standing by during the end-of-December break?",
     "Staff standing desks arrive before the December break.",
     "decision", "global"),
    ("thumbnail-lazy",
     "Product photos load slowly because thumbnails are generated on request rather than at "
     "upload.",
     "Why are catalogue pictures sluggish to appear?",
     "Catalogue pictures for spring appear in the printed brochure; the sluggish printer is "
     "fixed.",
     "event", "client"),
)  # fmt: skip

# exact-id: (name, id pattern, memory, query, answer, slot pools)
EXACT_ID: tuple[tuple[str, str, str, str, str], ...] = (
    ("incident", "INC-{d5}",
     "Resolved {id}: `{svc}` returned 502 errors for {minutes} minutes after a config push "
     "and was rolled back.",
     "What happened in incident {id}?",
     "`{svc}` returned 502 errors for {minutes} minutes after a config push; it was rolled "
     "back."),
    ("invoice", "INV-2025-{d4}",
     "Invoice {id} sent to {display}: {amount} for the {month} retainer, due in 30 days.",
     "How much was invoice {id} for?",
     "{amount} for the {month} retainer."),
    ("error-code", "ERR-{d4}",
     "`{svc}` raises {id} when its connection pool is exhausted during the {window} batch.",
     "What triggers {id} in `{svc}`?",
     "Connection pool exhaustion during the {window} batch."),
    ("order", "ORD-{d6}",
     "Order {id} for {display} is held at customs in {port}; the customer has been notified.",
     "Where is order {id} stuck?",
     "At customs in {port}."),
    ("purchase-order", "PO-{d5}",
     "Purchase order {id} approved: {seats} seats of {product} for {display}.",
     "How many seats does purchase order {id} cover?",
     "{seats} seats of {product}."),
    ("build", "BLD-{d5}",
     "Build {id} of `{svc}` failed on the {test} integration test.",
     "Why did build {id} fail?",
     "The {test} integration test failed."),
    ("cve", "CVE-2025-{d5}",
     "Patched {id} in `{svc}` by upgrading the {lib} library to {version}.",
     "How was {id} fixed in `{svc}`?",
     "By upgrading the {lib} library to {version}."),
    ("amount", "${d2},{d3}",
     "Ad spend for {display} in week {week} came to {id}.",
     "Which week did the ad spend of {display} come to {id}?",
     "Week {week}."),
)  # fmt: skip
_EXACT_POOLS: dict[str, tuple[str, ...]] = {
    "month": ("January", "February", "March", "April", "May", "June", "July", "August"),
    "window": ("morning", "midday", "evening", "nightly", "hourly", "weekly", "month-end"),
    "port": ("Rotterdam", "Antwerp", "Hamburg", "Felixstowe", "Le Havre", "Valencia", "Genoa"),
    "test": ("checkout", "login", "export", "search", "webhook", "billing", "upload", "signup"),
    "lib": ("xml parser", "image codec", "HTTP client", "YAML loader", "zip", "templating"),
}

# multi-hop: (pattern, relation, A slot, B slot, memory about B (variants), bridge, query)
MULTI_HOP: tuple[tuple[str, str, str, str, tuple[str, ...], str, str], ...] = (
    ("product-service", "uses", "subproduct", "hidden",
     ("`{hidden}` fell {n} minutes behind during the overnight batch window.",
      "`{hidden}` dropped {pct}% of writes during the last deploy."),
     "{subproduct} reads its figures from `{hidden}`.",
     "Is there anything I should know about {subproduct} reliability right now?"),
    ("contact-partner", "contact_of", "liaison", "partner",
     ("{partner} renewal moved to the next budget cycle after procurement pushed back.",
      "{partner} asked for a {pct}% discount on the next renewal."),
     "{liaison} is our point of contact for {partner}.",
     "What should I prepare before my next call with {liaison}?"),
    ("domain-owner", "same_owner", "microsite", "brand",
     ("{brand} TLS certificate expires in {n} days and auto-renew is disabled.",
      "{brand} still serves an outdated cookie banner."),
     "{microsite} and {brand} are owned by the same holding company.",
     "Any housekeeping due on the other web properties that belong with {microsite}?"),
    ("division-competitor", "competitor_of", "division", "competitor",
     ("{competitor} launched a free tier aimed at small teams.",
      "{competitor} cut list prices by {pct}% this month."),
     "{division} sees {competitor} as its main rival in renewals.",
     "What moves are the rivals of {division} making?"),
    ("person-project", "works_on", "engineer", "project",
     ("`{project}` nightly reconciliation now finishes in {n} minutes.",
      "`{project}` passed its load test at {n}00 requests per second."),
     "{engineer} owns `{project}` this quarter.",
     "What has {engineer} been shipping lately?"),
    ("service-technology", "uses", "worker", "tech",
     ("{tech} cluster alarms fired {n} times this week.",
      "{tech} cluster was upgraded and one node is still rebalancing."),
     "`{worker}` depends on {tech} for its background work.",
     "Is `{worker}` healthy at the moment?"),
)  # fmt: skip

# facts keyed per client: (slug, text, query now, query at a past date, values, category)
FACTS: tuple[tuple[str, str, str, str, tuple[str, ...], str], ...] = (
    ("hosting", "{domain} is hosted on {v}.", "Where is {domain} hosted?",
     "Where was {domain} hosted on {date}?",
     ("AWS ECS", "Google Cloud Run", "Fly.io", "Heroku", "Render", "Azure App Service",
      "DigitalOcean App Platform"), "technical"),
    ("primary-db", "{display} runs its primary database on {v}.",
     "Which database does {display} run on?",
     "Which database did {display} run on as of {date}?",
     ("PostgreSQL 13", "PostgreSQL 15", "PostgreSQL 16", "MySQL 8.0", "Aurora PostgreSQL",
      "CockroachDB"), "technical"),
    ("billing-contact", "Invoices for {display} go to {v} in accounts payable.",
     "Who receives the invoices of {display}?",
     "Who received the invoices of {display} on {date}?",
     ("Maya Lindgren", "Omar Haddad", "Julia Santos", "Victor Nguyen", "Ingrid Bauer",
      "Kwame Mensah"), "relationship"),
    ("support-plan", "{display} is on the {v} support plan.",
     "Which support plan is {display} on?",
     "Which support plan was {display} on as of {date}?",
     ("Starter", "Growth", "Business", "Enterprise", "Premier"), "strategy"),
    ("deploy-window", "Production deploys for {display} are allowed {v}.",
     "When may we deploy to production for {display}?",
     "When were production deploys for {display} allowed as of {date}?",
     ("on Tuesdays and Thursdays after 18:00 UTC", "on weekdays before 15:00 UTC",
      "on any weekday except Friday", "on Mondays only", "during the Sunday maintenance slot"),
     "technical"),
    ("uptime-sla", "The uptime commitment for {display} is {v}.",
     "What uptime does {display} get contractually?",
     "What uptime was {display} promised as of {date}?",
     ("99.5%", "99.9%", "99.95%", "99.99%"), "strategy"),
    ("cms", "{domain} publishes content through {v}.", "Which CMS powers {domain}?",
     "Which CMS powered {domain} on {date}?",
     ("WordPress", "Contentful", "Sanity", "Strapi", "Webflow", "Ghost"), "content"),
    ("retainer", "The monthly retainer for {display} is {v}.",
     "How much is the monthly retainer of {display}?",
     "How much was the monthly retainer of {display} as of {date}?",
     ("$4,800", "$6,500", "$8,200", "$9,900", "$12,000", "$15,500"), "strategy"),
    ("account-manager", "The account manager for {display} is {v}.",
     "Who manages the {display} account?",
     "Who managed the {display} account on {date}?",
     ("Elena Petrova", "Sam Whitaker", "Noor Aziz", "Daniel Brooks", "Chloe Martin"),
     "relationship"),
    ("analytics", "{domain} tracks traffic with {v}.", "What analytics tool does {domain} use?",
     "What analytics tool did {domain} use on {date}?",
     ("Google Analytics", "Plausible", "Matomo", "Mixpanel", "Amplitude", "Fathom"),
     "technical"),
)  # fmt: skip

# statuses per client: (slug, text, query now, query at a past date, ordered values, category)
STATUSES: tuple[tuple[str, str, str, str, tuple[str, ...], str], ...] = (
    ("data-migration", "{display} data migration: {v}.",
     "Where does the {display} data migration stand?",
     "Where did the {display} data migration stand on {date}?",
     ("planning", "in progress", "blocked on the DNS cutover", "validating row counts", "done"),
     "technical"),
    ("deploy-pipeline", "The `{svc}` deploy pipeline is {v}.",
     "Is the `{svc}` deploy pipeline working right now?",
     "Was the `{svc}` deploy pipeline working on {date}?",
     ("green", "failing on integration tests", "paused for the code freeze",
      "failing on a flaky lint step", "green again"), "technical"),
    ("onboarding", "{display} onboarding: {v}.", "How far along is the {display} onboarding?",
     "How far along was the {display} onboarding on {date}?",
     ("kickoff scheduled", "waiting on credentials", "training the editors", "complete"),
     "meeting"),
    ("contract-renewal", "{display} contract renewal: {v}.",
     "Where is the {display} contract renewal at?",
     "Where was the {display} contract renewal at on {date}?",
     ("not started", "proposal sent", "in legal review", "signed"), "strategy"),
    ("seo-audit", "{domain} SEO audit: {v}.", "What is the state of the {domain} SEO audit?",
     "What was the state of the {domain} SEO audit on {date}?",
     ("queued", "crawling", "report drafted", "delivered"), "content"),
    ("product-beta", "{product} beta: {v}.", "What stage is the {product} beta in?",
     "What stage was the {product} beta in on {date}?",
     ("internal testing", "closed beta", "open beta", "generally available"), "strategy"),
    ("security-review", "{display} security review: {v}.",
     "How is the {display} security review going?",
     "How was the {display} security review going on {date}?",
     ("scheduled", "findings open", "remediation underway", "passed"), "technical"),
    ("redesign", "{display} website redesign: {v}.",
     "What phase is the {display} website redesign in?",
     "What phase was the {display} website redesign in on {date}?",
     ("wireframes", "visual design", "development", "QA", "launched"), "brand"),
)  # fmt: skip

# ttl: (slug, old event, important memory, its type, query, answer, category)
TTL: tuple[tuple[str, str, str, str, str, str, str], ...] = (
    ("backups", "Nightly backup took 3 hours 10 minutes and finished with warnings.",
     "Backups of `{svc}` now use hourly snapshots retained for 35 days.", "decision",
     "How is `{svc}` backed up?", "Hourly snapshots retained for 35 days.", "technical"),
    ("capacity", "Load test peaked at 1,800 requests per second before latency degraded.",
     "Capacity target for {domain} is 5,000 requests per second after the autoscaling change.",
     "fact", "How much traffic can {domain} handle?", "5,000 requests per second.",
     "technical"),
    ("login", "Brief outage on the login page; it recovered on its own after 4 minutes.",
     "{product} sign-in moved behind the SSO gateway; every login now goes through SAML.",
     "decision", "How do people log in to {product}?", "Through the SSO gateway using SAML.",
     "technical"),
    ("newsletter-redesign", "A caller mentioned maybe wanting a newsletter redesign someday.",
     "{display} signed off the newsletter redesign: three templates, launching in June.",
     "decision", "What is agreed for the {display} newsletter redesign?",
     "Three templates, launching in June.", "content"),
    ("cache-ttl", "Cache hit ratio dipped to 71% during a traffic spike.",
     "Cache TTL for `{svc2}` is fixed at 300 seconds per the performance review.", "fact",
     "How is caching configured for `{svc2}`?", "A fixed 300-second TTL.", "technical"),
    ("pricing", "Minor typo reported in the footer of the pricing page.",
     "Pricing on {domain} is set at $49, $99 and $249 per month.", "fact",
     "What are the pricing tiers on {domain}?", "$49, $99 and $249 per month.", "strategy"),
    ("reports-latency", "Slow query warning on the reports endpoint (2.3 seconds).",
     "The `{svc}` reports endpoint must answer within 500 ms; an index on created_at was "
     "added.", "decision",
     "What latency budget applies to the `{svc}` reports endpoint?", "500 ms.", "technical"),
    ("file-storage", "Disk usage on the file server reached 78% during the quarterly export.",
     "{product} file storage moved to object storage with a 2 TB quota.", "decision",
     "Where does {product} keep its files?", "Object storage with a 2 TB quota.",
     "technical"),
)  # fmt: skip

# dedup: (slug, text, type, query, answer, category)
DEDUP: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("email-signature",
     "{display} wants customer emails signed by the account manager, not the support team.",
     "decision", "Who should sign customer emails for {display}?", "The account manager.",
     "relationship"),
    ("dns-provider", "{domain} uses Cloudflare for DNS and caching.", "fact",
     "Which provider handles DNS for {domain}?", "Cloudflare.", "technical"),
    ("month-end-freeze", "`{svc}` must not be deployed during the month-end close of {display}.",
     "decision", "Are there blackout periods for deploying `{svc}`?",
     "Yes: never during the month-end close.", "technical"),
    ("contact-channel", "{contact} prefers Slack over email for quick questions.", "fact",
     "How does {contact} like to be reached for quick questions?", "Slack.", "relationship"),
    ("roadmap-review", "The {product} roadmap review happens on the first Monday of every month.",
     "fact", "When is the {product} roadmap review?", "The first Monday of every month.",
     "meeting"),
    ("db-approvals", "{display} requires two approvals for production database changes.",
     "decision", "How many approvals do production database changes need at {display}?",
     "Two.", "technical"),
    ("brand-voice", "The brand voice of {display} is friendly but never uses exclamation marks.",
     "fact", "What tone should copy for {display} take?",
     "Friendly, without exclamation marks.", "brand"),
    ("cost-centre", "Invoices for {display} must reference their internal cost centre code.",
     "decision", "What must appear on invoices for {display}?",
     "Their internal cost centre code.", "strategy"),
)  # fmt: skip

# scope: (slug, text, query, values, category) -- the texts never name the client
SCOPE: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("palette", "Brand palette: primary {v} with white backgrounds.",
     "What colours does our brand palette use?",
     ("navy #1F3A5F", "forest green #2E5E4E", "burgundy #7A1F3D", "charcoal #333F48",
      "teal #007C80", "plum #5B2A86", "amber #D98E04", "slate blue #4A6FA5"), "brand"),
    ("newsletter-slot", "The newsletter goes out every {v}.", "When is our newsletter sent?",
     ("Tuesday at 09:00", "Wednesday at 07:30", "Thursday at 10:00", "Friday at 08:00",
      "Monday at 11:00", "Saturday at 09:30", "Sunday at 18:00", "Tuesday at 16:00"),
     "content"),
    ("sync-slot", "Weekly sync with the agency is on {v}.",
     "When is our weekly sync with the agency?",
     ("Mondays at 14:00", "Tuesdays at 10:30", "Wednesdays at 15:00", "Thursdays at 09:00",
      "Fridays at 11:00", "Mondays at 09:30", "Wednesdays at 16:30", "Thursdays at 13:00"),
     "meeting"),
    ("hashtag", "Social posts must carry the hashtag {v}.",
     "Which hashtag goes on our social posts?",
     ("#BuildBetter", "#MoveFaster", "#CareFirst", "#ShipIt", "#StoriesMatter", "#FreshDaily",
      "#AlwaysOn", "#ThinkAhead"), "brand"),
    ("support-hours", "Support desk hours are {v}.", "What are our support desk hours?",
     ("08:00-18:00 Eastern", "09:00-17:00 Central European", "around the clock",
      "07:00-19:00 Pacific", "10:00-20:00 Eastern", "08:30-16:30 UK time",
      "09:00-21:00 Central", "06:00-14:00 Pacific"), "relationship"),
    ("tone", "Tone of voice guide: {v}.", "How does our tone of voice guide describe our style?",
     ("warm, plain, no jargon", "confident, concise, technical",
      "playful, bold, short sentences", "calm, reassuring, precise",
      "direct, practical, upbeat", "witty, curious, editorial", "formal, careful, complete",
      "friendly, visual, energetic"), "brand"),
    ("dashboard-refresh", "Analytics dashboards refresh every {v}.",
     "How often do our analytics dashboards refresh?",
     ("5 minutes", "10 minutes", "15 minutes", "30 minutes", "hour", "2 hours", "6 hours",
      "12 hours"), "technical"),
    ("escalation", "Outage escalation: page the {v} first.",
     "Who gets paged first when we have an outage?",
     ("on-call engineer", "CTO", "platform lead", "duty manager", "site reliability lead",
      "head of support", "infrastructure manager", "founder"), "technical"),
    ("fiscal-year", "Our fiscal year starts in {v}.", "When does our fiscal year begin?",
     ("January", "February", "March", "April", "May", "June", "July", "October"), "strategy"),
    ("blog-signoff", "Blog posts need sign-off from the {v} before publishing.",
     "Who signs off blog posts before they go live?",
     ("head of marketing", "legal team", "founder", "communications director",
      "product lead", "editor-in-chief", "brand manager", "CEO"), "content"),
)  # fmt: skip

# credential: (slug, kind, text with {secret}, query, answer, secret shape)
CREDENTIALS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("staging-db", "connection-string",
     "Staging `{svc}` connects to PostgreSQL at "
     "postgres://app_{svc_u}:{secret}@db-staging.{domain}:5432/{svc_u}.",
     "How does the staging `{svc}` reach its database?",
     "PostgreSQL at db-staging.{domain}:5432, database {svc_u}, user app_{svc_u}.", "password"),
    ("payments-key", "api-key",
     "Stripe credentials for {display} production: api_key={secret}.",
     "Which payment credentials does {display} production use?",
     "A Stripe API key (held in the vault, never repeated).", "key"),
    ("smtp", "password",
     "SMTP relay for {domain} is smtp.{domain}:587 with user mailer and password={secret}.",
     "How is outgoing mail for {domain} relayed?",
     "Through smtp.{domain} on port 587 as user mailer.", "password"),
    ("cache-url", "connection-string",
     "Cache for `{svc2}` lives at redis://default:{secret}@cache.{domain}:6379/0.",
     "Where does `{svc2}` keep its cache?", "Redis at cache.{domain}:6379, database 0.",
     "password"),
    ("ci-token", "bearer-token",
     "CI deploys of `{svc}` send the header Authorization: Bearer {secret}.",
     "How does CI authenticate when deploying `{svc}`?",
     "With a bearer token in the Authorization header.", "token"),
    ("backoffice-admin", "password",
     "Back-office admin login for {product}: user admin, password: {secret}.",
     "How do we get into the {product} back office?",
     "With the admin user; the password is kept out of answers.", "password"),
    ("webhook-secret", "webhook-secret",
     "Form webhooks on {domain} are signed with webhook_secret={secret}.",
     "How are form webhooks on {domain} verified?", "They are signed with a shared secret.",
     "hex"),
    ("sftp-drop", "connection-string",
     "Nightly reports for {display} are uploaded to "
     "sftp://reports:{secret}@files.{domain}:22/outbound.",
     "Where do we upload the nightly reports for {display}?",
     "To the SFTP drop at files.{domain}, folder outbound, user reports.", "password"),
)  # fmt: skip

# background noise
_CHANGES = (
    "tidy up the retry logic", "add request tracing", "remove dead feature flags",
    "split the settings module", "tighten input validation", "refresh the test fixtures",
    "cache the pricing lookup", "document the webhook handler", "drop a deprecated endpoint",
    "speed up the CSV export", "fix a timezone bug in reports", "add pagination to the admin list",
    "rename confusing environment variables", "harden the file upload check",
    "log slow database queries", "batch outgoing notifications",
)  # fmt: skip
_ISSUES = (
    ("cannot download last month's statement", "sent a fresh link"),
    ("two-factor codes arrive late", "switched them to the authenticator app"),
    ("dashboard shows the wrong currency", "corrected the account locale"),
    ("export button does nothing in Safari", "shared the workaround and filed a bug"),
    ("asked to add a colleague as admin", "granted after manager approval"),
    ("duplicate welcome emails", "removed the second subscription"),
    ("search ignores accented names", "logged it for the search team"),
    ("cannot change the billing address", "updated it manually"),
    ("mobile layout overlaps on small screens", "escalated to design"),
    ("asked for an invoice copy", "resent the PDF"),
)  # fmt: skip
_SALES_TOPICS = (
    "next year's budget", "a second brand site", "extra support hours", "analytics training",
    "a loyalty programme", "moving to quarterly billing", "a case study", "adding a new region",
    "a referral discount", "a content calendar", "an accessibility review", "video production",
)  # fmt: skip
_DECISIONS = (
    ("keep weekly releases", "smaller changes are easier to roll back"),
    ("pin dependency versions", "a transitive upgrade broke the build last month"),
    ("move status meetings to async updates", "the team spans four time zones"),
    ("archive tickets older than a year", "search results were cluttered"),
    ("require design review for new pages", "the last launch had inconsistent layouts"),
    ("turn off the legacy webhook", "nobody has called it in ninety days"),
    ("add a staging approval step", "two hotfixes skipped testing"),
    ("batch invoices on the first business day", "finance asked for one run per month"),
)  # fmt: skip
_RETRO = (
    "too many context switches during incident weeks", "handoffs between agents lost context",
    "release notes were late twice", "on-call pages at night were mostly noise",
    "estimates for content work were too optimistic", "review queue grew over the holidays",
)  # fmt: skip
_FORGET_REASONS = ("requested deletion", "duplicate note", "posted to the wrong client")


def _secs(days: float) -> int:
    return int(round(days * SECONDS_PER_DAY))


def _date_text(ts: float) -> str:
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return f"{dt.day} {dt.strftime('%B')} {dt.year}"


@dataclass(slots=True)
class _Mem:
    seq: int
    ts: int
    text: str
    type: str
    fields: dict[str, Any]
    id: str = ""


@dataclass(slots=True)
class _Op:
    seq: int
    ts: int
    kind: str
    target: _Mem | None = None
    reason: str | None = None
    src: str | None = None
    relation: str | None = None
    dst: str | None = None


@dataclass(slots=True)
class _Ask:
    seq: int
    ts: int
    text: str
    client_id: str | None
    relevant: list[_Mem]
    stale: list[_Mem]
    tags: list[str]
    answer: str | None = None
    at_time: int | None = None


class _Plan:
    """Everything the simulation will write, before ids are assigned in time order."""

    def __init__(self) -> None:
        self.items: list[_Mem | _Op] = []
        self.asks: list[_Ask] = []
        self.seq = 0
        self.seen: set[tuple[str, str, str]] = set()
        self.tokens: set[str] = set()

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def store(
        self, ts: int, text: str, mtype: str, *, duplicate: bool = False, **fields: Any
    ) -> _Mem | None:
        key = (fields.get("client_id", "global"), mtype, text)
        if key in self.seen and not duplicate:
            return None
        self.seen.add(key)
        fields.setdefault("category", _CATEGORY_OF_TYPE[mtype])
        mem = _Mem(self._next(), ts, text, mtype, fields)
        self.items.append(mem)
        return mem

    def must_store(self, ts: int, text: str, mtype: str, **fields: Any) -> _Mem:
        mem = self.store(ts, text, mtype, **fields)
        if mem is None:
            raise RuntimeError(f"generated the same text twice by accident: {text!r}")
        return mem

    def forget(self, ts: int, target: _Mem, reason: str) -> None:
        self.items.append(_Op(self._next(), ts, "forget", target=target, reason=reason))

    def relate(self, ts: int, src: str, relation: str, dst: str) -> None:
        self.items.append(_Op(self._next(), ts, "relate", src=src, relation=relation, dst=dst))

    def ask(
        self, ts: int, text: str, client_id: str | None, relevant: list[_Mem], **kw: Any
    ) -> None:
        kw.setdefault("stale", [])
        self.asks.append(_Ask(self._next(), ts, text, client_id, relevant, **kw))

    def token(self, rng: random.Random, pattern: str) -> str:
        """A fresh id such as ``INC-48213`` never used before in this dataset."""
        while True:
            value = pattern.format(
                d2=rng.randint(11, 98),
                d3=rng.randint(100, 999),
                d4=f"{rng.randint(0, 9999):04d}",
                d5=rng.randint(10000, 99999),
                d6=rng.randint(100000, 999999),
            )
            if value not in self.tokens:
                self.tokens.add(value)
                return value

    @property
    def n_stores(self) -> int:
        return sum(isinstance(i, _Mem) for i in self.items)


class AgentMemorySimulator:
    """Builds the ``agent-memories`` dataset.

    Args:
        n_clients: Number of simulated clients (at most ``len(CLIENT_PROFILES)``).
        months: Length of the simulated timeline (30.5 days per month).
        start: ISO 8601 start of the timeline.
        queries_per_tag: Queries built for each primary tag.
        n_memories: Total store operations; background noise fills up to it.
        event_ttl_days: Event TTL of the reference model (seed 000: 30 days). Events that are
            relevant to a non-``ttl`` query are asked about before they reach it.
        max_query_lag_days: Longest wait between the last write a query depends on and the
            query.
        exact_id_family: Memories per ``exact-id`` family (the relevant one and near-identical
            distractors).
        forget_share: Share of ``exact-id`` and ``status`` scenarios that also write a wrong
            memory and forget it.
        noise_forget_share: Share of background memories forgotten later.
        name: Dataset name.
        version: Dataset version.
    """

    def __init__(
        self,
        *,
        n_clients: int = 6,
        months: float = 6,
        start: str = "2025-01-06T08:00:00Z",
        queries_per_tag: int = 32,
        n_memories: int = 2400,
        event_ttl_days: float = 30.0,
        max_query_lag_days: float = 20.0,
        exact_id_family: int = 8,
        forget_share: float = 0.25,
        noise_forget_share: float = 0.015,
        name: str = "agent-memories",
        version: str = "1",
    ) -> None:
        self.n_clients = n_clients
        self.months = months
        self.start = start
        self.queries_per_tag = queries_per_tag
        self.n_memories = n_memories
        self.event_ttl_days = event_ttl_days
        self.max_query_lag_days = max_query_lag_days
        self.exact_id_family = exact_id_family
        self.forget_share = forget_share
        self.noise_forget_share = noise_forget_share
        self.name = name
        self.version = version

    # ------------------------------------------------------------------ helpers
    def _check(self) -> None:
        if not 1 <= self.n_clients <= len(CLIENT_PROFILES):
            raise ValueError(f"n_clients must lie in [1, {len(CLIENT_PROFILES)}]")
        if self.queries_per_tag < 1:
            raise ValueError("queries_per_tag must be at least 1")
        if self.exact_id_family < 2:
            raise ValueError("exact_id_family must be at least 2")
        if self.max_query_lag_days >= self.event_ttl_days - 2:
            raise ValueError("max_query_lag_days must be below event_ttl_days - 2")
        if self.months * 30.5 < self.event_ttl_days + 100:
            raise ValueError("the timeline must be at least event_ttl_days + 100 days long")
        limits = {
            "paraphrase": len(PARAPHRASE),
            "exact-id": len(EXACT_ID) * self.n_clients,
            "multi-hop": len(MULTI_HOP) * self.n_clients,
            "supersession": len(FACTS) * self.n_clients,
            "status": len(STATUSES) * self.n_clients,
            "temporal": (len(FACTS) + len(STATUSES)) * self.n_clients - 2 * self.queries_per_tag,
            "ttl": len(TTL) * self.n_clients,
            "dedup": len(DEDUP) * self.n_clients,
            "scope": len(SCOPE) * self.n_clients,
            "credential": len(CREDENTIALS) * self.n_clients,
        }
        for tag, limit in limits.items():
            if self.queries_per_tag > limit:
                raise ValueError(
                    f"queries_per_tag={self.queries_per_tag} needs more {tag} material than "
                    f"n_clients={self.n_clients} provides"
                )

    def _anchor(self, rng: random.Random, need_days: float) -> int:
        return self.origin_ + rng.randint(0, max(0, self.span_ - _secs(need_days)))

    def _ask_ts(self, rng: random.Random, after: int, *, event: int | None = None) -> int:
        """A query time after ``after``; before ``event`` + TTL - 2 days when given."""
        lo = after + 3600
        hi = after + _secs(self.max_query_lag_days)
        if event is not None:
            hi = min(hi, event + _secs(self.event_ttl_days - 2))
        hi = min(hi, self.origin_ + self.span_)
        if hi < lo:
            raise RuntimeError("no room left on the timeline for a query")
        return rng.randint(lo, hi)

    @staticmethod
    def _agent(rng: random.Random, *choices: str) -> str:
        return rng.choice(choices or AGENTS)

    # ------------------------------------------------------------------ scenarios
    def _paraphrase(
        self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]
    ) -> None:
        picks = rng.sample(range(len(PARAPHRASE)), self.queries_per_tag)
        for index in picks:
            slug, memory, query, decoy, mtype, scope = PARAPHRASE[index]
            client = rng.choice(clients) if scope == "client" else None
            cid = client.id if client else "global"
            t0 = self._anchor(rng, 45) + _secs(12)
            fields: dict[str, Any] = {
                "source_agent": self._agent(rng),
                "client_id": cid,
                "importance": rng.choice(("medium", "high")),
                "knowledge_category": "general",
            }
            if mtype == "fact":
                fields["key"] = f"{cid}-{slug}"
            mem = plan.must_store(t0, memory, mtype, **fields)
            d_ts = t0 + rng.randint(-_secs(10), _secs(10))
            plan.must_store(
                d_ts,
                decoy,
                "event",
                source_agent=self._agent(rng),
                client_id=cid,
                importance="medium",
            )
            ts = self._ask_ts(rng, max(t0, d_ts), event=t0 if mtype == "event" else None)
            plan.ask(
                ts,
                query,
                client.id if client else None,
                [mem],
                tags=["paraphrase", f"client:{cid}"],
                answer=memory,
            )

    def _exact_id(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(t, c) for t in EXACT_ID for c in clients]
        for template, client in rng.sample(combos, self.queries_per_tag):
            name, pattern, memory, query, answer = template
            slots = client.slots()
            slots["svc"] = rng.choice(client.services)
            t0 = self._anchor(rng, 50)
            target_ts = t0 + _secs(10)

            def categories() -> dict[str, str]:
                return {name: rng.choice(pool) for name, pool in _EXACT_POOLS.items()}

            def fill(ident: str, cats: dict[str, str], s: dict[str, str] = slots) -> dict[str, str]:
                """Slots of one family member: shared categories, its own id and numbers."""
                return {
                    **s,
                    **cats,
                    "id": ident,
                    "minutes": str(rng.randint(4, 95)),
                    "amount": f"${rng.randint(2, 40)},{rng.randint(1, 9)}00",
                    "seats": str(rng.randint(5, 400)),
                    "version": f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
                    "week": str(rng.randint(1, 52)),
                }

            family = categories()
            agent = self._agent(rng, "ops-agent", "support-bot", "sales-agent", "claude-code")
            common = {"source_agent": agent, "client_id": client.id, "importance": "medium"}
            target_id = plan.token(rng, pattern)
            target_slots = fill(target_id, family)
            target = plan.must_store(target_ts, memory.format(**target_slots), "event", **common)
            last = target_ts
            for _ in range(self.exact_id_family - 1):
                ts = t0 + rng.randint(0, _secs(15))
                plan.must_store(
                    ts, memory.format(**fill(plan.token(rng, pattern), family)), "event", **common
                )
                last = max(last, ts)
            ask_ts = self._ask_ts(rng, last, event=target_ts)
            tags = ["exact-id", f"client:{client.id}", f"id:{name}"]
            stale: list[_Mem] = []
            if rng.random() < self.forget_share:
                wrong_slots = fill(target_id, categories())
                while memory.format(**wrong_slots) == target.text:
                    wrong_slots = fill(target_id, categories())
                wrong_ts = target_ts - rng.randint(_secs(1), _secs(5))
                wrong = plan.must_store(wrong_ts, memory.format(**wrong_slots), "event", **common)
                plan.forget(rng.randint(wrong_ts + 3600, ask_ts - 3600), wrong, "wrong details")
                stale.append(wrong)
                tags.append("forget")
            plan.ask(
                ask_ts,
                query.format(**target_slots),
                client.id,
                [target],
                stale=stale,
                tags=tags,
                answer=answer.format(**target_slots),
            )

    def _multi_hop(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(p, c) for p in MULTI_HOP for c in clients]
        picks = rng.sample(combos, self.queries_per_tag)
        modes = ("relate", "co-occurrence", "both")
        for i, (pattern, client) in enumerate(picks):
            name, relation, a_slot, b_slot, b_texts, bridge, query = pattern
            mode = modes[i % 3]
            slots = client.slots()
            slots |= {"n": str(rng.randint(3, 60)), "pct": str(rng.randint(3, 30))}
            a_name, b_name = slots[a_slot], slots[b_slot]
            t0 = self._anchor(rng, 60)
            b_ts = t0 + rng.randint(_secs(10), _secs(30))
            last = b_ts
            if mode in ("relate", "both"):
                ts = t0 + rng.randint(0, _secs(30))
                plan.relate(ts, a_name, relation, b_name)
                last = max(last, ts)
            if mode in ("co-occurrence", "both"):
                ts = t0 + rng.randint(0, _secs(30))
                plan.must_store(
                    ts,
                    bridge.format(**slots),
                    "fact",
                    source_agent=self._agent(rng, "consolidation-engine", "claude-code"),
                    client_id=client.id,
                    key=f"{client.id}-link-{name}",
                    importance="medium",
                    knowledge_category="relationship",
                )
                last = max(last, ts)
            text = rng.choice(b_texts).format(**slots)
            mem = plan.must_store(
                b_ts,
                text,
                "event",
                source_agent=self._agent(rng, "ops-agent", "sales-agent", "claude-code"),
                client_id=client.id,
                importance="medium",
            )
            plan.ask(
                self._ask_ts(rng, last, event=b_ts),
                query.format(**slots),
                client.id,
                [mem],
                tags=["multi-hop", f"client:{client.id}", f"via:{mode}", f"relation:{relation}"],
                answer=text,
            )

    def _chain(
        self,
        rng: random.Random,
        plan: _Plan,
        client: ClientProfile,
        template: tuple[str, str, str, str, tuple[str, ...], str],
        *,
        status: bool,
        k: int,
        wrong: bool = False,
    ) -> tuple[list[_Mem], list[str], _Mem | None, int]:
        """Versions of a fact key or status subject: (versions, values, wrong one, last ts)."""
        slug, text, _, _, values, category = template
        slots = client.slots()
        if status:
            picks = sorted(rng.sample(range(len(values)), k))
            chosen = [values[i] for i in picks]
        else:
            chosen = rng.sample(values, k)
        gaps = [rng.randint(_secs(6), _secs(22)) for _ in range(k - 1)]
        t = self._anchor(rng, sum(gaps) / SECONDS_PER_DAY + self.max_query_lag_days + 1)
        versions: list[_Mem] = []
        bad: _Mem | None = None
        for i, value in enumerate(chosen):
            if i:
                t += gaps[i - 1]
            fields: dict[str, Any] = {
                "source_agent": self._agent(
                    rng, "sales-agent", "claude-code", "ops-agent", "consolidation-engine"
                ),
                "client_id": client.id,
                "importance": rng.choice(("medium", "high")),
                "knowledge_category": category,
            }
            if status:
                fields |= {"subject": f"{client.id}:{slug}", "status_value": value}
            else:
                fields["key"] = f"{client.id}-{slug}"
            if wrong and i == k - 1:
                gap = gaps[i - 1]
                w_ts = t - gap + rng.randint(3600, gap // 3)
                w_fields = {**fields, "status_value": "cancelled"}
                bad = plan.must_store(
                    w_ts, text.format(**slots, v="cancelled"), "status", **w_fields
                )
                plan.forget(rng.randint(w_ts + 3600, t - 3600), bad, "posted to the wrong subject")
            mtype = "status" if status else "fact"
            versions.append(plan.must_store(t, text.format(**slots, v=value), mtype, **fields))
        return versions, chosen, bad, t

    def _supersession_status_temporal(
        self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]
    ) -> None:
        n = self.queries_per_tag
        facts = rng.sample([(f, c) for f in FACTS for c in clients], len(FACTS) * len(clients))
        statuses = [(s, c) for s in STATUSES for c in clients]
        statuses = rng.sample(statuses, len(statuses))
        n_temporal_status = min(len(statuses) - n, max(n - (len(facts) - n), round(n * 0.4)))
        n_temporal_fact = n - n_temporal_status
        if n_temporal_fact > len(facts) - n:
            raise ValueError(f"queries_per_tag={n}: not enough fact and status chains left")
        for template, client in facts[:n]:
            k = rng.randint(2, 4)
            versions, values, _, last = self._chain(rng, plan, client, template, status=False, k=k)
            plan.ask(
                self._ask_ts(rng, last),
                template[2].format(**client.slots()),
                client.id,
                [versions[-1]],
                stale=versions[:-1],
                tags=["supersession", f"client:{client.id}", f"versions:{len(versions)}"],
                answer=values[-1],
            )
        for template, client in statuses[:n]:
            wrong = rng.random() < self.forget_share
            versions, values, bad, last = self._chain(
                rng, plan, client, template, status=True, k=rng.randint(2, 4), wrong=wrong
            )
            tags = ["status", f"client:{client.id}", f"versions:{len(versions)}"]
            stale = versions[:-1]
            if bad is not None:
                stale = [*stale, bad]
                tags.append("forget")
            plan.ask(
                self._ask_ts(rng, last),
                template[2].format(**client.slots()),
                client.id,
                [versions[-1]],
                stale=stale,
                tags=tags,
                answer=values[-1],
            )
        temporal = [(t, c, False) for t, c in facts[n : n + n_temporal_fact]]
        temporal += [(t, c, True) for t, c in statuses[n : n + n_temporal_status]]
        for template, client, status in temporal:
            versions, values, _, last = self._chain(
                rng, plan, client, template, status=status, k=rng.randint(3, 4)
            )
            i = rng.randint(0, len(versions) - 2)
            at = rng.randint(versions[i].ts + _secs(1), versions[i + 1].ts - _secs(1))
            kind = "status" if status else "fact"
            plan.ask(
                self._ask_ts(rng, last),
                template[3].format(**client.slots(), date=_date_text(at)),
                client.id,
                [versions[i]],
                stale=versions[:i] + versions[i + 1 :],
                tags=["temporal", f"client:{client.id}", f"temporal:{kind}"],
                answer=values[i],
                at_time=at,
            )

    def _ttl(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(t, c) for t in TTL for c in clients]
        for template, client in rng.sample(combos, self.queries_per_tag):
            slug, event, important, itype, query, answer, category = template
            slots = client.slots()
            age = rng.randint(_secs(self.event_ttl_days + 5), _secs(self.event_ttl_days + 60))
            t_event = self._anchor(rng, age / SECONDS_PER_DAY + 1)
            ask_ts = t_event + age
            old = plan.must_store(
                t_event,
                event.format(**slots),
                "event",
                source_agent=self._agent(rng, "ops-agent", "support-bot", "sales-agent"),
                client_id=client.id,
                importance=rng.choice(("low", "medium")),
                knowledge_category=category,
            )
            lo = max(self.origin_, t_event - _secs(10))
            fields: dict[str, Any] = {
                "source_agent": self._agent(rng, "claude-code", "ops-agent", "sales-agent"),
                "client_id": client.id,
                "importance": "high",
                "knowledge_category": category,
            }
            if itype == "fact":
                fields["key"] = f"{client.id}-{slug}"
            keep = plan.must_store(
                rng.randint(lo, ask_ts - _secs(1)), important.format(**slots), itype, **fields
            )
            plan.ask(
                ask_ts,
                query.format(**slots),
                client.id,
                [keep],
                stale=[old],
                tags=["ttl", f"client:{client.id}"],
                answer=answer,
            )

    def _dedup(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(t, c) for t in DEDUP for c in clients]
        patterns = ("same-agent", "cross-agent", "both")
        for i, (template, client) in enumerate(rng.sample(combos, self.queries_per_tag)):
            slug, text, mtype, query, answer, category = template
            pattern = patterns[i % 3]
            first_agent = self._agent(rng)
            fields: dict[str, Any] = {
                "client_id": client.id,
                "importance": rng.choice(("medium", "high")),
                "knowledge_category": category,
            }
            if mtype == "fact":
                fields["key"] = f"{client.id}-{slug}"
            body = text.format(**client.slots())
            t0 = self._anchor(rng, 15 + self.max_query_lag_days)
            first = plan.must_store(t0, body, mtype, source_agent=first_agent, **fields)
            others = [a for a in AGENTS if a != first_agent]
            agents: list[str] = []
            if pattern in ("same-agent", "both"):
                agents.append(first_agent)
            if pattern in ("cross-agent", "both"):
                agents += rng.sample(others, rng.randint(1, 2))
            last = t0
            for agent in agents:
                ts = t0 + rng.randint(3600, _secs(12))
                plan.store(ts, body, mtype, duplicate=True, source_agent=agent, **dict(fields))
                last = max(last, ts)
            plan.ask(
                self._ask_ts(rng, last),
                query.format(**client.slots()),
                client.id,
                [first],
                tags=["dedup", f"client:{client.id}", f"dup:{pattern}"],
                answer=answer,
            )

    def _scope(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = rng.sample([(s, c) for s in SCOPE for c in clients], self.queries_per_tag)
        written: dict[str, dict[str, _Mem]] = {}
        for topic in SCOPE:
            if not any(t is topic for t, _ in combos):
                continue
            slug, text, _, values, category = topic
            chosen = rng.sample(values, len(clients))
            written[slug] = {}
            for client, value in zip(clients, chosen, strict=True):
                ts = self.origin_ + rng.randint(0, int(self.span_ * 0.75))
                written[slug][client.id] = plan.must_store(
                    ts,
                    text.format(v=value),
                    "fact",
                    source_agent=self._agent(rng, "sales-agent", "claude-code", "support-bot"),
                    client_id=client.id,
                    key=f"{client.id}-{slug}",
                    importance="medium",
                    knowledge_category=category,
                )
        for topic, client in combos:
            slug, _, query, _, _ = topic
            mems = written[slug]
            last = max(m.ts for m in mems.values())
            plan.ask(
                self._ask_ts(rng, last),
                query,
                client.id,
                [mems[client.id]],
                stale=[m for cid, m in mems.items() if cid != client.id],
                tags=["scope", f"client:{client.id}"],
                answer=mems[client.id].text,
            )

    def _credential(
        self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]
    ) -> None:
        combos = [(t, c) for t in CREDENTIALS for c in clients]
        alnum = string.ascii_letters + string.digits
        for template, client in rng.sample(combos, self.queries_per_tag):
            slug, kind, text, query, answer, shape = template
            if shape == "hex":
                secret = "".join(rng.choice("0123456789abcdef") for _ in range(40))
            else:
                size = {"password": 18, "key": 32, "token": 40}[shape]
                secret = "".join(rng.choice(alnum) for _ in range(size))
            slots = client.slots()
            slots["svc_u"] = slots["svc"].replace("-", "_")
            t0 = self._anchor(rng, self.max_query_lag_days + 1)
            mem = plan.must_store(
                t0,
                text.format(**slots, secret=secret),
                "fact",
                source_agent=self._agent(rng, "ops-agent", "claude-code"),
                client_id=client.id,
                key=f"{client.id}-{slug}",
                importance="high",
                knowledge_category="technical",
                metadata={"contains_secret": kind},
            )
            plan.ask(
                self._ask_ts(rng, t0),
                query.format(**slots),
                client.id,
                [mem],
                tags=["credential", f"client:{client.id}", f"secret:{kind}"],
                answer=answer.format(**slots),
            )

    # ------------------------------------------------------------------ background
    def _noise_text(
        self, rng: random.Random, client: ClientProfile | None, counters: Counter[str]
    ) -> tuple[str, str, dict[str, Any]]:
        cid = client.id if client else "global"
        if client is None:
            kind = rng.choice(("retro", "handbook", "decision"))
        else:
            kind = rng.choice(
                ("pr", "merge", "ticket", "deploy", "scale", "cert", "call", "proposal",
                 "merge-notes", "contradiction", "decision")
            )  # fmt: skip
        importance = rng.choice(("low", "medium", "medium", "medium", "high"))
        fields: dict[str, Any] = {"client_id": cid, "importance": importance}
        mtype = "event"
        counters[kind] += 1
        n = counters[kind]
        if kind == "retro":
            text = f"Team retro #{n}: {rng.choice(_RETRO)}."
            agent = "consolidation-engine"
        elif kind == "handbook":
            text = f"Updated section {n} of the on-call handbook: {rng.choice(_RETRO)}."
            agent = self._agent(rng, "ops-agent", "claude-code")
        elif kind == "decision":
            choice, reason = rng.choice(_DECISIONS)
            where = f"for {client.display}" if client else "across the team"
            text = f"Decision {n}: {choice} {where} because {reason}."
            mtype, agent = "decision", self._agent(rng)
        elif kind in ("pr", "merge"):
            assert client is not None
            svc = rng.choice(client.services)
            verb = "Opened" if kind == "pr" else "Merged"
            text = f"{verb} PR #{1000 + n * 7} on `{svc}`: {rng.choice(_CHANGES)}."
            agent = "claude-code"
        elif kind == "ticket":
            assert client is not None
            issue, fix = rng.choice(_ISSUES)
            text = f"Ticket SUP-{20000 + n * 3} from a {client.display} user: {issue}; {fix}."
            agent = "support-bot"
        elif kind == "deploy":
            assert client is not None
            svc = rng.choice(client.services)
            env = rng.choice(("staging", "production", "canary"))
            text = f"Deployed `{svc}` v{rng.randint(1, 4)}.{n}.{rng.randint(0, 9)} to {env}."
            agent = "ops-agent"
        elif kind == "scale":
            assert client is not None
            svc = rng.choice(client.services)
            text = (
                f"Scaled `{svc}` to {rng.randint(2, 12)} replicas for traffic on "
                f"{client.domain} (change {n})."
            )
            agent = "ops-agent"
        elif kind == "cert":
            assert client is not None
            text = f"Rotated the TLS certificate for {client.domain} (rotation {n})."
            agent = "ops-agent"
        elif kind == "call":
            assert client is not None
            text = (
                f"Call {n} with {client.contact} ({client.display}): discussed "
                f"{rng.choice(_SALES_TOPICS)}."
            )
            agent = "sales-agent"
            fields["knowledge_category"] = "meeting"
        elif kind == "proposal":
            assert client is not None
            text = (
                f"Sent proposal {n} to {client.display} for {rng.choice(_SALES_TOPICS)} at "
                f"${rng.randint(2, 30)},{rng.randint(0, 9)}00."
            )
            agent = "sales-agent"
            fields["knowledge_category"] = "strategy"
        elif kind == "merge-notes":
            assert client is not None
            text = (
                f"Merged {rng.randint(2, 9)} notes about {client.display} "
                f"{rng.choice(_SALES_TOPICS)} into one summary (batch {n})."
            )
            agent = "consolidation-engine"
        else:
            assert client is not None
            text = (
                f"Flagged a contradiction between two notes on {client.display} "
                f"{rng.choice(_SALES_TOPICS)} (review {n})."
            )
            agent = "consolidation-engine"
            fields["importance"] = "high"
        fields["source_agent"] = agent
        return text, mtype, fields

    def _noise(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        for client in clients:
            plan.relate(self.origin_ + rng.randint(0, _secs(3)), client.id, "uses", client.stack[0])
            plan.relate(
                self.origin_ + rng.randint(0, _secs(3)),
                self._agent(rng, "claude-code", "ops-agent", "sales-agent"),
                "works_on",
                client.id,
            )
        counters: Counter[str] = Counter()
        target = self.n_memories - plan.n_stores
        written = 0
        while written < target:
            client = None if rng.random() < 0.15 else rng.choice(clients)
            text, mtype, fields = self._noise_text(rng, client, counters)
            ts = self.origin_ + rng.randint(0, self.span_)
            mem = plan.store(ts, text, mtype, **fields)
            if mem is None:
                continue
            written += 1
            end = self.origin_ + self.span_
            forgettable = mtype != "decision"  # decisions are an immutable audit trail
            if forgettable and rng.random() < self.noise_forget_share and ts + _secs(2) < end:
                when = min(end, ts + rng.randint(_secs(1), _secs(20)))
                plan.forget(when, mem, rng.choice(_FORGET_REASONS))

    # ------------------------------------------------------------------ assembly
    def simulate(self, seed: int) -> Dataset:
        """Run the simulation; the same seed gives the same dataset.

        Raises:
            ValueError: If the parameters cannot produce ``queries_per_tag`` queries per tag.
        """
        self._check()
        rng = random.Random(seed)
        self.origin_ = int(parse_ts(self.start))
        self.span_ = _secs(self.months * 30.5)
        clients = CLIENT_PROFILES[: self.n_clients]
        plan = _Plan()
        self._paraphrase(rng, plan, clients)
        self._exact_id(rng, plan, clients)
        self._multi_hop(rng, plan, clients)
        self._supersession_status_temporal(rng, plan, clients)
        self._ttl(rng, plan, clients)
        self._dedup(rng, plan, clients)
        self._scope(rng, plan, clients)
        self._credential(rng, plan, clients)
        self._noise(rng, plan, clients)
        return self._assemble(plan, seed)

    def _assemble(self, plan: _Plan, seed: int) -> Dataset:
        items = sorted(plan.items, key=lambda i: (i.ts, i.seq))
        width = max(5, len(str(plan.n_stores)))
        ops: list[MemoryOp] = []
        n = 0
        for item in items:
            if isinstance(item, _Mem):
                n += 1
                item.id = f"m{n:0{width}d}"
                ops.append(MemoryOp.store(item.id, item.ts, item.text, item.type, **item.fields))
            elif item.kind == "forget":
                assert item.target is not None
                ops.append(MemoryOp.forget(item.ts, item.target.id, item.reason))
            else:
                assert item.src and item.relation and item.dst
                ops.append(MemoryOp.relate(item.ts, item.src, item.relation, item.dst))
        asks = sorted(plan.asks, key=lambda a: (a.ts, a.seq))
        qwidth = max(4, len(str(len(asks))))
        queries = [
            Query(
                0,
                f"q{i:0{qwidth}d}",
                float(a.ts),
                a.text,
                a.client_id,
                None if a.at_time is None else float(a.at_time),
                {m.id: 1 for m in a.relevant},
                tuple(m.id for m in a.stale),
                tuple(a.tags),
                a.answer,
            )
            for i, a in enumerate(asks, start=1)
        ]
        meta = {
            "name": self.name,
            "version": self.version,
            "description": (
                "Simulated multi-agent, multi-client team memory: background work plus "
                "scenarios that each exercise one retrieval path (tagged per query)."
            ),
            "license": "Apache-2.0",
            "source": f"memlab.datasets.generate, seed {seed}",
        }
        return Dataset(None, meta, ops, queries)

    # ------------------------------------------------------------------ documentation
    def readme(self, dataset: Dataset, seed: int) -> str:
        """The dataset's README.md, with its counts."""
        stores = dataset.stores()
        ops = Counter(op.op for op in dataset.ops)
        types = Counter(op.type for op in stores)
        agents = Counter(op.fields.get("source_agent") for op in stores)
        client_count = Counter(op.fields.get("client_id") for op in stores)
        tags = Counter(q.tags[0] for q in dataset.queries)
        secondary = Counter(
            t.split(":")[0] + ":" if ":" in t else t for q in dataset.queries for t in q.tags[1:]
        )
        first = min(op.ts for op in dataset.ops)
        last = max(max(op.ts for op in dataset.ops), max(q.ts for q in dataset.queries))
        clients = CLIENT_PROFILES[: self.n_clients]
        lines = [
            f"# {self.name}",
            "",
            "A simulated team memory: five agents write events, facts, decisions and statuses "
            f"for {self.n_clients} clients (plus `global`) over about {self.months:g} months. "
            "Most writes are background work; woven into them are scenarios built so that "
            "one retrieval path should win each query. Every query's first tag names that "
            "path. Format: dataset format v1 (`memlab.datasets.format`).",
            "",
            "Regenerate (byte-identical):",
            "",
            "```",
            f"memlab datasets generate --seed {seed} datasets/{self.name}",
            "```",
            "",
            "## Timeline",
            "",
            f"From {_date_text(first)} to {_date_text(last)}. "
            f"{len(dataset.ops)} operations: {ops['store']} stores, {ops['forget']} forgets, "
            f"{ops['relate']} relates; {len(dataset.queries)} queries interleaved with the "
            "writes (each is asked a short while after the last write it depends on).",
            "",
            "| type | stores |",
            "|---|---|",
            *[f"| {t} | {types[t]} |" for t in ("event", "fact", "decision", "status")],
            "",
            "## Agents",
            "",
            "| agent | stores | writes mostly |",
            "|---|---|---|",
            f"| claude-code | {agents['claude-code']} | pull requests, refactors, config facts |",
            f"| support-bot | {agents['support-bot']} | support tickets and their fixes |",
            f"| ops-agent | {agents['ops-agent']} | deploys, scaling, certificates, incidents |",
            f"| sales-agent | {agents['sales-agent']} | calls, proposals, account facts |",
            f"| consolidation-engine | {agents['consolidation-engine']} | merged notes, "
            "contradictions, links between entities |",
            "",
            "## Clients",
            "",
            "| client_id | domain | product | services | stores |",
            "|---|---|---|---|---|",
            *[
                f"| {c.id} | {c.domain} | {c.product} | `{c.services[0]}`, `{c.services[1]}` "
                f"| {client_count[c.id]} |"
                for c in clients
            ],
            f"| global | | | | {client_count['global']} |",
            "",
            "Entity names are written so the fast-path extractor finds them: technology names "
            "(PostgreSQL, Kafka, Stripe ...), domains (acme-corp.com), services in backticks "
            "(`billing-api`) and capitalised product names (Orion Dashboard).",
            "",
            "## Query tags",
            "",
            "| primary tag | queries | how the queries are built |",
            "|---|---|---|",
            f"| paraphrase | {tags['paraphrase']} | The memory and the query share almost no "
            "word (synonyms throughout); a decoy memory of the same client shares several words "
            "with the query but is about something else. Dense retrieval should win. |",
            f"| exact-id | {tags['exact-id']} | A family of {self.exact_id_family} "
            "near-identical events that differ only in an id (incident, invoice, error code, "
            "order, purchase order, build, CVE) or a dollar figure; the query quotes one id. "
            "BM25 should win. |",
            f"| multi-hop | {tags['multi-hop']} | The query names a rarely mentioned entity A "
            "(sub-product, liaison, microsite, division, engineer, background worker); the "
            "relevant event mentions only entity B. A and B are linked by a `relate` op "
            "(`relation:` tag), by a fact mentioning both, or both (`via:` tag). Graph "
            "retrieval / LIF should win. |",
            f"| supersession | {tags['supersession']} | A fact key rewritten 2-4 times; "
            "relevant = the current version, stale = the older ones. |",
            f"| status | {tags['status']} | A status subject updated 2-4 times; relevant = "
            "the latest, stale = the earlier ones. |",
            f"| temporal | {tags['temporal']} | A fact or status chain of 3-4 versions, asked "
            "with `at_time` between two versions; relevant = the version valid then, stale = "
            "the others. |",
            f"| ttl | {tags['ttl']} | A low/medium event older than {self.event_ttl_days:g} "
            "days that nothing asks about (stale, it should have expired) next to a "
            "high-importance decision or fact on the same topic (relevant). The event names no "
            "entity, so other queries of the client have little reason to touch it (a replay "
            "that counts the top hits of every query as accesses can still keep it alive). |",
            f"| dedup | {tags['dedup']} | The same text stored again by the same agent "
            "(`dup:same-agent`), by other agents (`dup:cross-agent`, corroboration) or both; "
            "relevant = the first id, onto which the later writes map. |",
            f"| scope | {tags['scope']} | Every client has a near-identical fact on the same "
            "topic (the texts never name the client); the query is scoped to one client, the "
            "other clients' facts are stale, so leakage is measurable. |",
            f"| credential | {tags['credential']} | The memory carries a secret (password, "
            "API key, bearer token, connection string, webhook secret; `secret:` tag, "
            "`metadata.contains_secret`); the reference answer never contains it. |",
            "",
            "Secondary tags: "
            + ", ".join(f"`{name}` ({count})" for name, count in sorted(secondary.items()))
            + ". `client:<id>` names the client of the scenario; `forget` marks a query for "
            "which a wrong memory was written and then forgotten (it is stale).",
            "",
            "## Guarantees",
            "",
            "- Every relevant and stale id is stored before its query's `ts`; queries are spread "
            "over the whole timeline.",
            "- Events relevant to a non-`ttl` query are asked about less than "
            f"{self.event_ttl_days:g} days after they are written; `ttl` stale events are older "
            "than that.",
            "- Apart from the `dedup` scenarios no (client, type, text) is written twice.",
            f"- The same seed gives byte-identical files (`random.Random({seed})`, no clock).",
            "",
        ]
        return "\n".join(lines)


def generate_dataset(
    seed: int,
    out_dir: str | os.PathLike[str],
    *,
    n_clients: int = 6,
    months: float = 6,
    queries_per_tag: int = 32,
    n_memories: int = 2400,
    **kwargs: Any,
) -> Dataset:
    """Generate the agent-memories dataset into ``out_dir`` (with its README.md).

    Args:
        seed: Seed of ``random.Random``.
        out_dir: Target directory (written atomically).
        n_clients: Number of simulated clients.
        months: Timeline length.
        queries_per_tag: Queries per primary tag.
        n_memories: Total store operations.
        **kwargs: Further :class:`AgentMemorySimulator` parameters.

    Returns:
        The dataset as written.
    """
    sim = AgentMemorySimulator(
        n_clients=n_clients,
        months=months,
        queries_per_tag=queries_per_tag,
        n_memories=n_memories,
        **kwargs,
    )
    dataset = sim.simulate(seed)
    return write_dataset(dataset, out_dir, extra_files={"README.md": sim.readme(dataset, seed)})
