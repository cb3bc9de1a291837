<?php
/**
 * Plugin Name:       Publishing Gateway Companion
 * Description:       REST support for the publishing gateway: exposes Rank Math SEO meta and a protected operation-key meta over the REST API, refuses duplicate creates carrying an operation key that already exists (safe under concurrency), and adds lookup/status endpoints under publishing-gateway/v1.
 * Version:           1.4.0
 * Requires at least: 5.9
 * Requires PHP:      7.4
 * License:           GPL-2.0-or-later
 * License URI:       https://www.gnu.org/licenses/gpl-2.0.html
 * Text Domain:       publishing-gateway-companion
 *
 * Works as a regular plugin (wp-content/plugins/publishing-gateway-companion/: activation makes
 * the lookup index, uninstall.php removes it) or dropped as a single file into
 * wp-content/mu-plugins/ (no activation there: the index is made on the first call of the
 * plugin's own status route, see maybe_create_key_index()).
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

// Loaded twice (e.g. both as mu-plugin and regular plugin)? Keep the first copy.
if ( defined( 'PGW_COMPANION_VERSION' ) ) {
	return;
}

define( 'PGW_COMPANION_VERSION', '1.4.0' );

final class PGW_Companion {

	const SLUG            = 'publishing-gateway-companion';
	const VERSION         = PGW_COMPANION_VERSION;
	const REST_NAMESPACE  = 'publishing-gateway/v1';
	const OP_KEY_META     = '_gateway_operation_key';
	// The gateway's XML-RPC transport cannot write protected meta: it stores the same key
	// under this non-protected name. Lookups and the guard know both.
	const XMLRPC_KEY_META = 'gateway_operation_key';
	const LOCK_TIMEOUT    = 15;
	const MAX_LOOKUP_KEYS = 100;
	// An index on postmeta (meta_key, meta_value prefixes) for the lookups by operation key:
	// without it, each guarded write and each lookup scans every row carrying the key
	// (about 0.5 s at 10,000 gateway objects, growing with the site). Made on activation
	// (one ALTER TABLE), kept on deactivation, removed with its option by uninstall.php
	// (which repeats these two names: it runs without this file loaded).
	const KEY_INDEX        = 'pgw_operation_key';
	const KEY_INDEX_OPTION = 'pgw_companion_key_index';
	// Who may learn the WordPress version and the index state from /status: the role the
	// gateway's site user needs (author). A contributor learns only what detection needs.
	const STATUS_DETAIL_CAP = 'publish_posts';

	/** @var string[] */
	const SEO_META = array( 'rank_math_title', 'rank_math_description', 'rank_math_focus_keyword' );

	/**
	 * Named MySQL locks held by this PHP request, keyed by spl_object_id() of the REST request.
	 *
	 * @var array<int,string>
	 */
	private static $held_locks = array();

	/** @var bool */
	private static $shutdown_registered = false;

	public static function boot() {
		add_action( 'init', array( __CLASS__, 'register_meta' ) );
		add_action( 'rest_api_init', array( __CLASS__, 'register_routes' ) );
		// Runs after authentication, route matching, parameter validation and the
		// route's permission_callback, immediately before the endpoint callback
		// (also for each sub-request of a /batch/v1 request).
		add_filter( 'rest_dispatch_request', array( __CLASS__, 'guard_before_callback' ), 10, 4 );
		// Always runs after the callback (or after an error short-circuit).
		add_filter( 'rest_request_after_callbacks', array( __CLASS__, 'release_after_callback' ), 10, 3 );
	}

	/**
	 * Activation (regular installs): make the lookup index now, so that no visitor's request
	 * ever runs a schema change. On a network-wide activation each site gets it on the first
	 * call of its status route instead (maybe_create_key_index()).
	 *
	 * @param bool $network_wide Whether the plugin is being network-activated.
	 */
	public static function activate( $network_wide = false ) {
		if ( ! $network_wide ) {
			self::create_key_index();
		}
	}

	/**
	 * Must-use installs get no activation hook, and network activations and updates by file
	 * copy none per site: the plugin's own status route (which the gateway calls when it
	 * detects the plugin) makes the index once, when the option says nothing was tried yet.
	 * The option is autoloaded: checking it costs no query.
	 */
	public static function maybe_create_key_index() {
		if ( false === get_option( self::KEY_INDEX_OPTION ) ) {
			self::create_key_index();
		}
	}

	/**
	 * Create the postmeta index the lookups by operation key use: one metadata read (SHOW
	 * INDEX, no row read) and at most one ALTER TABLE, which InnoDB builds in place while
	 * the table stays writable. The option records that it exists, or that creating it
	 * failed (e.g. no ALTER privilege; lookups stay correct without it, only slower).
	 */
	public static function create_key_index() {
		global $wpdb;
		$present = self::key_index_exists();
		if ( ! $present ) {
			// meta_key(32) + meta_value(96) in utf8mb4 stays under every row format's 767 bytes;
			// the WHERE clause still compares the whole value.
			// phpcs:ignore WordPress.DB.DirectDatabaseQuery.SchemaChange,WordPress.DB.DirectDatabaseQuery.DirectQuery,WordPress.DB.DirectDatabaseQuery.NoCaching
			$present = false !== $wpdb->query(
				'ALTER TABLE ' . $wpdb->postmeta . ' ADD INDEX ' . self::KEY_INDEX . ' (meta_key(32), meta_value(96))'
			);
		}
		update_option( self::KEY_INDEX_OPTION, $present ? 'present' : 'failed', true );
	}

	/**
	 * @return bool Whether wp_postmeta has the lookup index (a metadata read).
	 */
	public static function key_index_exists() {
		global $wpdb;
		// phpcs:ignore WordPress.DB.DirectDatabaseQuery.DirectQuery,WordPress.DB.DirectDatabaseQuery.NoCaching
		return (bool) $wpdb->get_var(
			$wpdb->prepare( "SHOW INDEX FROM {$wpdb->postmeta} WHERE Key_name = %s", self::KEY_INDEX )
		);
	}

	/**
	 * Post types that carry the operation key (and get the duplicate guard).
	 *
	 * @return string[]
	 */
	public static function operation_key_post_types() {
		$types = apply_filters( 'publishing_gateway_companion_post_types', array( 'post', 'attachment' ) );
		return array_values( array_unique( array_filter( array_map( 'strval', (array) $types ) ) ) );
	}

	/**
	 * Post types that get the Rank Math SEO meta.
	 *
	 * @return string[]
	 */
	public static function seo_post_types() {
		$types = apply_filters( 'publishing_gateway_companion_seo_post_types', array( 'post' ) );
		return array_values( array_unique( array_filter( array_map( 'strval', (array) $types ) ) ) );
	}

	public static function can_edit_object( $allowed, $meta_key, $object_id ) {
		return current_user_can( 'edit_post', (int) $object_id );
	}

	/**
	 * An operation key as stored: a string of valid UTF-8 without markup (tags stripped with
	 * wp_strip_all_tags(), so "<b>x</b>" is stored as "x"), control characters or surrounding
	 * whitespace ('' for anything that is not a scalar). The gateway's keys
	 * ("tenant/job/v1/draft": letters, digits, "/", "-", "_", ".") pass unchanged.
	 *
	 * @param mixed $value The submitted meta value.
	 * @return string
	 */
	public static function sanitize_operation_key( $value ) {
		if ( ! is_scalar( $value ) ) {
			return '';
		}
		$value = wp_strip_all_tags( wp_check_invalid_utf8( (string) $value ) );
		return trim( (string) preg_replace( '/[\x00-\x1F\x7F]/', '', $value ) );
	}

	public static function register_meta() {
		foreach ( self::seo_post_types() as $post_type ) {
			foreach ( self::SEO_META as $meta_key ) {
				register_post_meta(
					$post_type,
					$meta_key,
					array(
						'type'              => 'string',
						'single'            => true,
						'show_in_rest'      => true,
						// Plain text, as WordPress keeps its own: tags stripped, one line
						// (the description may keep its line breaks).
						'sanitize_callback' => 'rank_math_description' === $meta_key ? 'sanitize_textarea_field' : 'sanitize_text_field',
						'auth_callback'     => array( __CLASS__, 'can_edit_object' ),
					)
				);
			}
		}
		foreach ( self::operation_key_post_types() as $post_type ) {
			register_post_meta(
				$post_type,
				self::OP_KEY_META,
				array(
					'type'              => 'string',
					'single'            => true,
					'show_in_rest'      => true,
					'description'       => __( 'Idempotency key of the publishing-gateway operation that created this object.', 'publishing-gateway-companion' ),
					'sanitize_callback' => array( __CLASS__, 'sanitize_operation_key' ),
					'auth_callback'     => array( __CLASS__, 'can_edit_object' ),
				)
			);
		}
	}

	/* ------------------------------------------------------------------ */
	/* Duplicate guard                                                     */
	/* ------------------------------------------------------------------ */

	/**
	 * If the request is a create (or update) on a guarded post type and carries
	 * meta[_gateway_operation_key], serialize on a MySQL named lock for that key
	 * and refuse with 409 when another object already carries it.
	 *
	 * @param mixed           $dispatch_result Null unless something already short-circuited.
	 * @param WP_REST_Request $request
	 * @param string          $route
	 * @param array           $handler
	 * @return mixed
	 */
	public static function guard_before_callback( $dispatch_result, $request, $route, $handler ) {
		if ( null !== $dispatch_result ) {
			return $dispatch_result;
		}

		$target = self::guarded_target( $request, $handler );
		if ( null === $target ) {
			return $dispatch_result;
		}

		$meta = $request->get_param( 'meta' );
		if ( ! is_array( $meta ) || ! isset( $meta[ self::OP_KEY_META ] ) || ! is_scalar( $meta[ self::OP_KEY_META ] ) ) {
			return $dispatch_result;
		}
		$key = self::sanitize_operation_key( $meta[ self::OP_KEY_META ] );
		if ( '' === $key ) {
			return $dispatch_result;
		}

		global $wpdb;
		$lock = self::lock_name( $key );
		$got  = $wpdb->get_var( $wpdb->prepare( 'SELECT GET_LOCK(%s, %d)', $lock, self::LOCK_TIMEOUT ) );
		if ( '1' !== (string) $got ) {
			return new WP_Error(
				'gateway_lock_timeout',
				__( 'Could not obtain the operation-key lock; try again.', 'publishing-gateway-companion' ),
				array(
					'status'        => 503,
					'operation_key' => $key,
				)
			);
		}

		$existing = self::find_first_object_with_key( $key, $target['exclude_id'] );
		if ( $existing ) {
			$wpdb->query( $wpdb->prepare( 'SELECT RELEASE_LOCK(%s)', $lock ) );
			return new WP_Error(
				'gateway_duplicate_operation',
				__( 'An object with this operation key already exists.', 'publishing-gateway-companion' ),
				array(
					'status'        => 409,
					'existing_id'   => (int) $existing->ID,
					'existing_type' => $existing->post_type,
					'operation_key' => $key,
				)
			);
		}

		// Keep the lock until the object (and its meta) has been written.
		self::$held_locks[ spl_object_id( $request ) ] = $lock;
		if ( ! self::$shutdown_registered ) {
			self::$shutdown_registered = true;
			register_shutdown_function( array( __CLASS__, 'release_all_locks' ) );
		}
		return $dispatch_result;
	}

	public static function release_after_callback( $response, $handler, $request ) {
		if ( $request instanceof WP_REST_Request ) {
			$id = spl_object_id( $request );
			if ( isset( self::$held_locks[ $id ] ) ) {
				$lock = self::$held_locks[ $id ];
				unset( self::$held_locks[ $id ] );
				self::release_lock( $lock );
			}
		}
		return $response;
	}

	public static function release_all_locks() {
		$locks            = self::$held_locks;
		self::$held_locks = array();
		foreach ( $locks as $lock ) {
			self::release_lock( $lock );
		}
	}

	private static function release_lock( $lock ) {
		global $wpdb;
		if ( $wpdb ) {
			$wpdb->query( $wpdb->prepare( 'SELECT RELEASE_LOCK(%s)', $lock ) );
		}
	}

	private static function lock_name( $key ) {
		return 'pgw:' . md5( $key );
	}

	/**
	 * Decide whether the matched handler is a create/update of a guarded post type.
	 *
	 * @return array{post_type:string,exclude_id:int}|null
	 */
	private static function guarded_target( $request, $handler ) {
		if ( ! $request instanceof WP_REST_Request || empty( $handler['callback'] ) || ! is_array( $handler['callback'] ) ) {
			return null;
		}
		list( $controller, $method ) = array_values( $handler['callback'] ) + array( null, null );
		if ( ! $controller instanceof WP_REST_Posts_Controller || ! in_array( $method, array( 'create_item', 'update_item' ), true ) ) {
			return null;
		}
		$route = untrailingslashit( (string) $request->get_route() );
		foreach ( self::operation_key_post_types() as $post_type ) {
			$obj = get_post_type_object( $post_type );
			if ( ! $obj || empty( $obj->show_in_rest ) ) {
				continue;
			}
			$namespace = ! empty( $obj->rest_namespace ) ? $obj->rest_namespace : 'wp/v2';
			$base      = ! empty( $obj->rest_base ) ? $obj->rest_base : $obj->name;
			$prefix    = '/' . trim( $namespace, '/' ) . '/' . trim( $base, '/' );
			if ( 'create_item' === $method && 0 === strcasecmp( $route, $prefix ) ) {
				return array(
					'post_type'  => $post_type,
					'exclude_id' => 0,
				);
			}
			if ( 'update_item' === $method && preg_match( '@^' . preg_quote( $prefix, '@' ) . '/(\d+)$@i', $route, $m ) ) {
				return array(
					'post_type'  => $post_type,
					'exclude_id' => (int) $m[1],
				);
			}
		}
		return null;
	}

	/**
	 * @return object|null Row with ID and post_type, any post type and any status.
	 */
	private static function find_first_object_with_key( $key, $exclude_id = 0 ) {
		global $wpdb;
		return $wpdb->get_row(
			$wpdb->prepare(
				"SELECT p.ID, p.post_type
				   FROM {$wpdb->postmeta} pm
				   INNER JOIN {$wpdb->posts} p ON p.ID = pm.post_id
				  WHERE pm.meta_key IN (%s, %s) AND pm.meta_value = %s AND p.ID <> %d
				  ORDER BY p.ID ASC
				  LIMIT 1",
				self::OP_KEY_META,
				self::XMLRPC_KEY_META,
				$key,
				(int) $exclude_id
			)
		);
	}

	/* ------------------------------------------------------------------ */
	/* REST endpoints                                                      */
	/* ------------------------------------------------------------------ */

	public static function register_routes() {
		register_rest_route(
			self::REST_NAMESPACE,
			'/objects',
			array(
				array(
					'methods'             => WP_REST_Server::READABLE,
					'callback'            => array( __CLASS__, 'rest_objects' ),
					'permission_callback' => array( __CLASS__, 'can_use_api' ),
					'args'                => array(
						'keys' => array(
							/* translators: %d: the most operation keys one request may name. */
							'description'       => sprintf( __( 'Comma-separated operation keys (at most %d).', 'publishing-gateway-companion' ), self::MAX_LOOKUP_KEYS ),
							'type'              => 'string',
							'required'          => true,
							'validate_callback' => array( __CLASS__, 'validate_keys' ),
						),
					),
				),
			)
		);
		register_rest_route(
			self::REST_NAMESPACE,
			'/status',
			array(
				array(
					'methods'             => WP_REST_Server::READABLE,
					'callback'            => array( __CLASS__, 'rest_status' ),
					'permission_callback' => array( __CLASS__, 'can_use_api' ),
				),
			)
		);
	}

	public static function can_use_api() {
		return current_user_can( 'edit_posts' );
	}

	/**
	 * The distinct non-empty keys of a comma-separated list, in order.
	 *
	 * @param mixed $value The `keys` parameter.
	 * @return string[]
	 */
	private static function parse_keys( $value ) {
		$keys = array();
		foreach ( explode( ',', (string) $value ) as $k ) {
			$k = trim( $k );
			if ( '' !== $k ) {
				$keys[ $k ] = true;
			}
		}
		return array_map( 'strval', array_keys( $keys ) );
	}

	/**
	 * validate_callback of `keys`: a string naming 1 to MAX_LOOKUP_KEYS keys (core answers
	 * 400 rest_invalid_param with this message otherwise).
	 *
	 * @param mixed           $value   The parameter's value.
	 * @param WP_REST_Request $request The request.
	 * @param string          $param   The parameter's name.
	 * @return true|WP_Error
	 */
	public static function validate_keys( $value, $request, $param ) {
		$typed = rest_validate_request_arg( $value, $request, $param );
		if ( true !== $typed ) {
			return $typed;
		}
		$count = count( self::parse_keys( $value ) );
		if ( 0 === $count ) {
			return new WP_Error( 'rest_invalid_param', __( 'Name at least one operation key.', 'publishing-gateway-companion' ) );
		}
		if ( $count > self::MAX_LOOKUP_KEYS ) {
			/* translators: %d: the most operation keys one request may name. */
			return new WP_Error( 'rest_invalid_param', sprintf( __( 'At most %d operation keys per request.', 'publishing-gateway-companion' ), self::MAX_LOOKUP_KEYS ) );
		}
		return true;
	}

	/**
	 * What the plugin guarantees, for the gateway's detection. The WordPress version and the
	 * index state only for users with STATUS_DETAIL_CAP (the gateway's author); a contributor
	 * learns nothing beyond the plugin, its version and the meta it registers.
	 */
	public static function rest_status() {
		self::maybe_create_key_index();
		$status = array(
			'plugin'             => self::SLUG,
			'version'            => self::VERSION,
			'guard'              => true,
			'operation_key_meta' => self::OP_KEY_META,
			'lookup_meta'        => array( self::OP_KEY_META, self::XMLRPC_KEY_META ),
			'seo_meta'           => self::SEO_META,
		);
		if ( current_user_can( self::STATUS_DETAIL_CAP ) ) {
			$status['key_index'] = 'present' === get_option( self::KEY_INDEX_OPTION );
			$status['wordpress'] = get_bloginfo( 'version' );
		}
		return rest_ensure_response( $status );
	}

	/**
	 * Every object carrying one of the keys, any type and status. An object the caller may
	 * read (read_post) is described in full; one it may not is still reported, as
	 * {operation_key, id, type, readable: false}, so that a caller never mistakes it for
	 * absence (and never sends again what exists), yet learns nothing of its content.
	 */
	public static function rest_objects( WP_REST_Request $request ) {
		global $wpdb;

		$keys         = self::parse_keys( $request->get_param( 'keys' ) );
		$placeholders = implode( ',', array_fill( 0, count( $keys ), '%s' ) );
		$sql          = "SELECT pm.meta_value AS operation_key, p.ID, p.post_type, p.post_status,
		                        p.post_date, p.post_date_gmt, p.post_modified, p.post_modified_gmt,
		                        p.post_author, p.post_title, p.post_parent
		                   FROM {$wpdb->postmeta} pm
		                   INNER JOIN {$wpdb->posts} p ON p.ID = pm.post_id
		                  WHERE pm.meta_key IN (%s, %s) AND pm.meta_value IN ($placeholders)
		                  ORDER BY p.ID ASC, pm.meta_id ASC";
		// phpcs:ignore WordPress.DB.PreparedSQL.NotPrepared,WordPress.DB.DirectDatabaseQuery.DirectQuery,WordPress.DB.DirectDatabaseQuery.NoCaching
		$rows = $wpdb->get_results( $wpdb->prepare( $sql, array_merge( array( self::OP_KEY_META, self::XMLRPC_KEY_META ), $keys ) ) );
		if ( $wpdb->last_error ) {
			return new WP_Error( 'gateway_db_error', __( 'Database error while looking up operation keys.', 'publishing-gateway-companion' ), array( 'status' => 500 ) );
		}
		$rows = (array) $rows;
		// One query for every post the capability checks below read.
		_prime_post_caches( array_map( 'intval', wp_list_pluck( $rows, 'ID' ) ), false, false );

		$objects = array();
		foreach ( $rows as $row ) {
			$objects[] = self::object_entry( $row );
		}
		return rest_ensure_response( array( 'objects' => $objects ) );
	}

	/**
	 * One entry of /objects: in full when the current user may read the object, else only
	 * what proves that it exists.
	 *
	 * @param object $row A row of the lookup query.
	 * @return array
	 */
	private static function object_entry( $row ) {
		$id    = (int) $row->ID;
		$entry = array(
			'operation_key' => (string) $row->operation_key,
			'id'            => $id,
			'type'          => (string) $row->post_type,
		);
		if ( ! current_user_can( 'read_post', $id ) ) {
			return $entry + array( 'readable' => false );
		}
		return $entry + array(
			'readable'     => true,
			'editable'     => current_user_can( 'edit_post', $id ),
			'status'       => (string) $row->post_status,
			'date_gmt'     => self::gmt_date( $row->post_date_gmt, $row->post_date ),
			'modified_gmt' => self::gmt_date( $row->post_modified_gmt, $row->post_modified ),
			'author'       => (int) $row->post_author,
			'title'        => (string) $row->post_title,
			'parent'       => (int) $row->post_parent,
		);
	}

	/**
	 * Same convention as the core posts controller: unset GMT dates (drafts)
	 * are derived from the local date; result formatted like core ("Y-m-d\TH:i:s").
	 */
	private static function gmt_date( $gmt, $local ) {
		if ( '0000-00-00 00:00:00' === $gmt || '' === (string) $gmt ) {
			if ( '0000-00-00 00:00:00' === $local || '' === (string) $local ) {
				return null;
			}
			$gmt = get_gmt_from_date( $local );
		}
		$formatted = mysql_to_rfc3339( $gmt );
		return $formatted ? $formatted : null;
	}
}

PGW_Companion::boot();
register_activation_hook( __FILE__, array( 'PGW_Companion', 'activate' ) );
