"""An MCP result's blocks as the model gets them."""

from __future__ import annotations

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

from threads.mcp.results import to_output


async def test_blocks_that_cannot_be_shown_are_named_in_a_line() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="here"),
            EmbeddedResource(
                resource=BlobResourceContents(
                    uri="file:///a.bin", blob="AAEC", mime_type="application/zip"
                )
            ),
            ResourceLink(uri="https://example.com/r", name="report"),
            AudioContent(data="AAEC", mime_type="audio/wav"),
            ImageContent(data="AAEC", mime_type="image/png"),
        ]
    )
    output = await to_output(result, "srv.tool", images=None)
    assert output.content.splitlines() == [
        "here",
        "[resource file:///a.bin: application/zip, not shown]",
        "[resource link https://example.com/r: report]",
        "[audio (audio/wav), not shown]",
        "[an image (image/png, 3 bytes), not shown]",
    ]
    assert output.files == ()


async def test_structured_content_alone_is_given_as_json_and_errors_stay_errors() -> None:
    output = await to_output(
        CallToolResult(content=[], structured_content={"n": 1}), "srv.tool", images=None
    )
    assert output.content == '{"n":1}'
    failed = await to_output(
        CallToolResult(content=[TextContent(text="no")], is_error=True), "srv.tool", images=None
    )
    assert (failed.content, failed.is_error) == ("no", True)
