<?php
/**
 * Tiny HTTP probe (no curl needed): php http_status.php URL [user:password]
 * Prints the HTTP status code (000 when the server does not answer).
 */
$url  = isset( $argv[1] ) ? $argv[1] : '';
$auth = isset( $argv[2] ) ? $argv[2] : '';
$headers = array( 'Accept: application/json' );
if ( '' !== $auth ) {
	$headers[] = 'Authorization: Basic ' . base64_encode( $auth );
}
$ctx = stream_context_create(
	array(
		'http' => array(
			'method'          => 'GET',
			'header'          => implode( "\r\n", $headers ),
			'ignore_errors'   => true,
			'follow_location' => 0,
			'timeout'         => 5,
		),
	)
);
$body = @file_get_contents( $url, false, $ctx );
$code = '000';
if ( isset( $http_response_header[0] ) && preg_match( '#^HTTP/\S+\s+(\d{3})#', $http_response_header[0], $m ) ) {
	$code = $m[1];
}
echo $code, "\n";
