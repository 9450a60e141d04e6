"""PII redaction: each kind is found and counted; numbers that only look similar are left alone."""

import pytest

from stages.ingest.pii import PiiConfig, redact_pii
from stages.ingest.record import PII_KINDS

CFG = PiiConfig()


@pytest.mark.parametrize(
    "kind,text,expected",
    [
        ("email", "Schreiben Sie an jan.novak@example.cz.", "Schreiben Sie an <EMAIL>."),
        ("email", "Kontakt: info@müller-bau.de oder first+tag@mail.co.uk", "Kontakt: <EMAIL> oder <EMAIL>"),
        ("ip", "Server 192.168.1.254 answered, then 10.0.0.1.", "Server <IP_ADDRESS> answered, then <IP_ADDRESS>."),
        ("ip", "Address 2001:db8::8a2e:370:7334 is compressed.", "Address <IP_ADDRESS> is compressed."),
        ("ip", "Full 2001:0db8:85a3:0000:0000:8a2e:0370:7334 form.", "Full <IP_ADDRESS> form."),
        ("phone", "Ruf an unter +49 30 1234567!", "Ruf an unter <PHONE>!"),
        ("phone", "Glaoigh ar +353 (0)1 234 5678 inniu.", "Glaoigh ar <PHONE> inniu."),
        ("phone", "Tel. 0049 30 1234567 (Zentrale)", "Tel. <PHONE> (Zentrale)"),
        ("phone", "Appelez le +33 1 23 45 67 89.", "Appelez le <PHONE>."),
        ("phone", "Appelez le 01 23 45 67 89.", "Appelez le <PHONE>."),
        ("phone", "Telefon: 030 1234567, Fax: 030/123 45 67", "Telefon: <PHONE>, Fax: <PHONE>"),
        ("phone", "Bel 06-12345678 of (020) 794 6095.", "Bel <PHONE> of <PHONE>."),
        ("iban", "IBAN DE89 3704 0044 0532 0130 00, BIC COBADEFFXXX", "IBAN <IBAN>, BIC COBADEFFXXX"),
        ("iban", "IBAN: DE89370400440532013000.", "IBAN: <IBAN>."),
        ("iban", "Virement sur FR14 2004 1010 0505 0001 3M02 606 merci", "Virement sur <IBAN> merci"),
        ("iban", "Pay GB82 WEST 1234 5698 7654 32 BANK LTD", "Pay <IBAN> BANK LTD"),
    ],
)
def test_each_kind_redacted_and_counted(kind, text, expected):
    out, counts = redact_pii(text, CFG)
    assert out == expected
    assert counts == {kind: expected.count("<")}
    assert kind in PII_KINDS


@pytest.mark.parametrize(
    "text",
    [
        "In 2024 prices rose by 12 % compared with 2019-2023.",
        "The meeting is on 2024-05-01, or 01.05.2024 at 10:00, or 01/05/2024 10 am.",
        "It costs 1 234,56 € or €1.234.567,00 or $1,299.99; population 12 345 678.",
        "Upgrade from version 1.2.3 to 10.4.1 (build 1.2.3.4.5) or v2.4.1.0.",
        "ISBN 978-3-16-148410-0 and ISBN 0-306-40615-2 and 9783161484100.",
        "Order number 1234567890 and the long number 00012345 and 0012 are not phones.",
        "Opening hours 09.00-17.00 18.00-20.00; postcode 00-950 Warszawa; +15 000 visitors.",
        "Time 12:30:45, MAC 00:1A:2B:3C:4D:5E, C++ std::vector and dead::beef.",
        "Bad checksum DE89 3704 0044 0532 0130 01 stays, DE00 1234 5678 9012 3456 78 too.",
        "Written at home @ night with 3 friends.",
    ],
)
def test_false_positives_untouched(text):
    assert redact_pii(text, CFG) == (text, {})


def test_mixed_document_counts_every_kind():
    text = (
        "Contact ana@example.pt or +351 912 345 678. Server 203.0.113.7. "
        "Pay to PT50 0002 0123 1234 5678 9015 4. Or 1.1.1.1 and bob@example.org."
    )
    out, counts = redact_pii(text, CFG)
    assert counts == {"email": 2, "phone": 1, "ip": 2, "iban": 1}
    assert "@" not in out and "203.0" not in out and "PT50" not in out


def test_switches_and_replacements():
    text = "Mail a@b.com, call +49 30 1234567."
    assert redact_pii(text, PiiConfig(enabled=False)) == (text, {})
    assert redact_pii(text, PiiConfig(phone=False)) == ("Mail <EMAIL>, call +49 30 1234567.", {"email": 1})
    custom = PiiConfig(email_replacement="[email]", phone_replacement="[tel]")
    assert redact_pii(text, custom) == ("Mail [email], call [tel].", {"email": 1, "phone": 1})


def test_no_digits_no_at_fast_path():
    text = "Plain prose without any numbers or addresses. " * 50
    assert redact_pii(text, CFG) == (text, {})


def test_config_is_strict():
    with pytest.raises(ValueError):
        PiiConfig(emails=True)
